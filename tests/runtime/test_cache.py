"""Caches heal themselves: a damaged artifact is rebuilt with one warning, a failed write leaves
nothing behind and says what to do, and two processes build a cache entry once."""
import errno
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spacy_sapbert import cache as cache_module
from spacy_sapbert.search import resolve as resources
from spacy_sapbert.cache import ResourceError, cached_build


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _write(staging: Path) -> None:
    (staging / "data.txt").write_text("payload")


def _intact(path: Path) -> bool:
    return (path / "data.txt").exists() and (path / "data.txt").read_text() == "payload"


def _debris(cache: Path):
    return [p.name for p in cache.iterdir() if not p.name.endswith(".lock") and p.name != "entry"]


def test_a_damaged_entry_is_rebuilt_with_one_warning(cache, caplog):
    target = cache_module.cache_dir() / "entry"
    cached_build(target, _write, _intact, "a test entry")
    (target / "data.txt").write_text("overwritten")
    with caplog.at_level(logging.WARNING, logger="spacy_sapbert.cache"):
        assert cached_build(target, _write, _intact, "a test entry") == target
    assert _intact(target) and [r.message for r in caplog.records if "damaged" in r.message]
    assert _debris(cache) == []


def test_a_failed_write_leaves_no_staging_folder_and_names_the_way_out(cache):
    target = cache_module.cache_dir() / "entry"

    def full_disk(staging: Path) -> None:
        (staging / "part").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ResourceError, match=r"No space left on device.*SPACY_SAPBERT_CACHE"):
        cached_build(target, full_disk, _intact, "a test entry")
    assert not target.exists() and _debris(cache) == []


def test_two_processes_build_an_entry_once(cache, tmp_path):
    code = f"""
import time
from pathlib import Path
from spacy_sapbert.cache import cache_dir, cached_build
def build(staging):
    with open({str(tmp_path / "builds")!r}, "a") as f:
        f.write("x")
    time.sleep(1.5)
    (staging / "data.txt").write_text("payload")
intact = lambda p: (p / "data.txt").exists()
cached_build(cache_dir() / "entry", build, intact, "a test entry")
"""
    env = {**__import__("os").environ, "SPACY_SAPBERT_CACHE": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert (tmp_path / "builds").read_text() == "x"


def test_a_damaged_cached_index_is_not_taken_as_intact(tiny_index_dir, tiny_encoder, tmp_path):
    import shutil

    copy = Path(shutil.copytree(tiny_index_dir, tmp_path / "index"))
    assert resources._cached_index_intact(copy, tiny_encoder.fingerprint)
    rows = copy / "rows.npy"
    data = bytearray(rows.read_bytes())
    data[-1] ^= 0xFF
    rows.write_bytes(bytes(data))
    assert not resources._cached_index_intact(copy, tiny_encoder.fingerprint)
    meta = json.loads((copy / "meta.json").read_text())
    del meta["files"]
    (copy / "meta.json").write_text(json.dumps(meta))
    from spacy_sapbert.search.index import ConceptIndex, ConceptIndexError

    with pytest.raises(ConceptIndexError, match="records no file checksums"):
        ConceptIndex.load(copy)


def test_a_damaged_onnx_export_is_exported_again_and_a_given_one_refused(cache, tiny_model, caplog):
    from spacy_sapbert.encoders.base import EncoderError
    from spacy_sapbert.encoders.onnx import OnnxEncoder
    from spacy_sapbert.encoders.export import exported_model

    first = exported_model(tiny_model, "int8")
    vectors = OnnxEncoder(first).encode(["lactic acidosis"])
    onnx_file = first / "model.onnx"
    data = bytearray(onnx_file.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 200] = bytes(200)  # 200 bytes of weights overwritten
    onnx_file.write_bytes(bytes(data))
    with pytest.raises(EncoderError, match=r"model.onnx does not match the checksum"):
        OnnxEncoder(first)
    with caplog.at_level(logging.WARNING, logger="spacy_sapbert.cache"):
        again = exported_model(tiny_model, "int8")
    assert again == first and [r for r in caplog.records if "damaged" in r.message]
    assert (OnnxEncoder(again).encode(["lactic acidosis"]) == vectors).all()


def test_a_cache_path_that_is_a_file_gets_one_sentence(monkeypatch, tmp_path):
    from spacy_sapbert.cache import cache_dir

    taken = tmp_path / "a-file"
    taken.write_text("not a folder")
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(taken))
    with pytest.raises(ResourceError, match=r"^SPACY_SAPBERT_CACHE \(.*a-file\) cannot be used as a cache folder"):
        cache_dir()


def test_a_first_build_is_announced_at_info_not_warning(cache, caplog):
    target = cache_module.cache_dir() / "entry"
    with caplog.at_level(logging.INFO, logger="spacy_sapbert.first_use"):
        assert cached_build(target, _write, _intact, "a test entry", takes="about 1 s", seconds=1) == target
    said = [(r.levelno, r.message) for r in caplog.records]
    assert [level for level, _ in said] == [logging.INFO, logging.INFO], said
    assert said[0][1].startswith("Building the a test entry once (about 1 s on 2 quiet CPU cores)")
    # A build of a fraction of a second is not announced.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spacy_sapbert.first_use"):
        cached_build(cache_module.cache_dir() / "small", _write, _intact, "a small entry", takes="under a second",
                     quiet=True)
    assert not caplog.records


def test_first_use_speaks_on_stderr_where_logging_is_not_configured(tmp_path):
    """What is built once, and how long it took, is said on stderr with no -v and no logging
    set up; an application that sets up logging gets the records instead."""
    import os
    import subprocess
    import sys

    code = """
from pathlib import Path
from spacy_sapbert.cache import cache_dir, cached_build
def write(staging): (staging / "x").write_text("x")
cached_build(cache_dir() / "entry", write, lambda p: (p / "x").exists(), "test entry", takes="about 1 s")
"""
    env = dict(os.environ, SPACY_SAPBERT_CACHE=str(tmp_path))
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    assert "spacy-sapbert: Building the test entry once (about 1 s on 2 quiet CPU cores)" in said
    assert "spacy-sapbert: Built the test entry in 0 s." in said
    configured = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig(level=logging.WARNING)\n" + code],
                           env=dict(env, SPACY_SAPBERT_CACHE=str(tmp_path / "again")), capture_output=True,
                           text=True, check=True).stderr
    assert "spacy-sapbert: Building" not in configured and configured.count("Building the test entry once") == 1


def test_the_cache_follows_the_platform_after_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACY_SAPBERT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_module.cache_dir() == tmp_path / "xdg" / "spacy-sapbert"
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "mine"))
    assert cache_module.cache_dir() == tmp_path / "mine"


def test_an_unchanged_file_is_hashed_once_and_a_changed_one_again(cache, tmp_path, monkeypatch):
    """damaged_record remembers files whose checksum matched (size, mtime, inode), so a load
    does not hash an unchanged index again; a file written since, even to the same size, is
    hashed and its damage found."""
    import os

    from spacy_sapbert.cache import damaged_record, file_records

    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "codes.bin").write_bytes(b"0123456789")
    records = file_records(folder, ["codes.bin"])
    hashed = []
    real = cache_module.file_sha256
    monkeypatch.setattr(cache_module, "file_sha256", lambda path: hashed.append(path) or real(path))
    assert damaged_record(folder, records) is None and damaged_record(folder, records) is None
    assert len(hashed) == 2  # written this instant: its time stamps could hide a change, so not remembered
    later = time.time_ns() + 10**10
    monkeypatch.setattr(cache_module.time, "time_ns", lambda: later)
    assert damaged_record(folder, records) is None and damaged_record(folder, records) is None
    assert len(hashed) == 3
    before = (folder / "codes.bin").stat()
    (folder / "codes.bin").write_bytes(b"0123456780")  # same size, other bytes
    os.utime(folder / "codes.bin", ns=(before.st_atime_ns, before.st_mtime_ns))  # its old time put back
    assert damaged_record(folder, records) == (folder / "codes.bin", "checksum")
    assert len(hashed) == 4
