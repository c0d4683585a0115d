"""Corpus linking: shards, restarts, and the Ray engine giving what one process gives."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import DEMO_PATTERNS, SHARED_DATA, ruler_nlp
from test_cli import said
from typer.testing import CliRunner

from spacy_sapbert.cli import app
from spacy_sapbert.corpus.linking import link_corpus
from spacy_sapbert.corpus.shards import (
    CorpusError,
    LinkSettings,
    ShardLinker,
    input_files,
    parse_records,
    plan_shards,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def settings(tiny_model, tiny_index_dir, tmp_path_factory):
    ner = tmp_path_factory.mktemp("ner") / "ruler"
    ruler_nlp(DEMO_PATTERNS).to_disk(ner)
    return LinkSettings(ner=str(ner), model=str(tiny_model), index=str(tiny_index_dir), threshold=0.0)


def _write_corpus(folder, n_files=2, n_docs=7):
    folder.mkdir()
    texts = ["Lactic acidosis after metformin.", "Cisplatin and renal failure.", "", "Nothing here.",
             "Metformin, metformin and lactic acidosis."]
    for f in range(n_files):
        lines = [json.dumps({"id": f"{f}-{i}", "text": texts[(i + f) % len(texts)]}) for i in range(n_docs)]
        (folder / f"part{f}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _single_process(settings, folder):
    """What `link --input FILE` writes for each file, in file order."""
    linker = ShardLinker(settings, ".")
    out = []
    for path in input_files(str(folder / "*.jsonl")):
        records = parse_records(path.read_text(encoding="utf-8").splitlines(), path)
        out += [json.dumps(r, ensure_ascii=False) for r in linker.link_records(records)]
    return out


def _shards(out_dir, ext="jsonl"):
    return [line for path in sorted(out_dir.glob(f"*.{ext}")) for line in path.read_text(encoding="utf-8").splitlines()]


def test_records_name_their_file_and_line():
    assert parse_records(["plain text", ""], "f.txt") == [{"text": "plain text"}, {"text": ""}]
    with pytest.raises(CorpusError, match=r"^big.jsonl:1002: expected a JSON object"):
        parse_records(['{"text": "ok"}', '{"txt": 1}'], "big.jsonl", "jsonl", first_line=1001)


def test_shards_cut_files_by_lines(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(["x"] * 25) + "\n")
    (tmp_path / "b.jsonl").write_text("y\nz")  # no final newline: still two documents
    shards = plan_shards(input_files(str(tmp_path)), 10)
    assert [(s.name, s.start, s.n_lines) for s in shards] == [
        ("a.00000", 0, 10), ("a.00001", 10, 10), ("a.00002", 20, 5), ("b.00000", 0, 2)]
    assert shards[3].read_lines() == ["y", "z"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.jsonl").write_text("x\n")
    with pytest.raises(CorpusError, match="would write the same output shards"):
        plan_shards(input_files(str(tmp_path / "**" / "*.jsonl")), 10)
    with pytest.raises(CorpusError, match="matches no file"):
        input_files(str(tmp_path / "*.txt"))
    with pytest.raises(CorpusError, match="at least 1"):
        plan_shards(input_files(str(tmp_path)), 0)


def test_a_local_run_gives_the_single_process_output_and_resumes(settings, tmp_path):
    folder = _write_corpus(tmp_path / "in")
    out = tmp_path / "out"
    summary = link_corpus(str(folder / "*.jsonl"), out, settings, docs_per_shard=3, progress=False)
    assert (summary.shards, summary.skipped, summary.documents) == (6, 0, 14) and summary.mentions > 10
    assert _shards(out) == _single_process(settings, folder)
    assert link_corpus(str(folder), out, settings, docs_per_shard=3, progress=False).skipped == 6
    # A damaged shard, a missing record and a killed run's staging file: only those shards again.
    with (out / "part0.00001.jsonl").open("a") as handle:
        handle.write("\n")
    (out / "_shards" / "part1.00002.json").unlink()
    (out / ".part1.00000.jsonl.123.part").write_text("half")
    again = link_corpus(str(folder), out, settings, docs_per_shard=3, progress=False)
    assert sorted(r.name for r in again.results) == ["part0.00001", "part1.00002"]
    assert _shards(out) == _single_process(settings, folder) and not list(out.glob(".*.part"))
    # A changed input line is linked again, as its shard's input checksum no longer matches.
    lines = (folder / "part1.jsonl").read_text().splitlines()
    lines[0] = json.dumps({"id": "new", "text": "Metformin."})
    (folder / "part1.jsonl").write_text("\n".join(lines) + "\n")
    again = link_corpus(str(folder), out, settings, docs_per_shard=3, progress=False)
    assert [r.name for r in again.results] == ["part1.00000"] and _shards(out) == _single_process(settings, folder)


def test_corpus_runs_refuse_what_would_mix_or_lose_documents(settings, tmp_path):
    folder = _write_corpus(tmp_path / "in")
    out = tmp_path / "out"
    link_corpus(str(folder), out, settings, docs_per_shard=5, progress=False)
    other = LinkSettings(**{**settings.__dict__, "threshold": 0.5})
    with pytest.raises(CorpusError, match="holds shards linked with other settings"):
        link_corpus(str(folder), out, other, docs_per_shard=5, progress=False)
    with pytest.raises(CorpusError, match="inside the --output folder"):
        link_corpus(str(tmp_path / "**" / "*.jsonl"), out, settings, docs_per_shard=5, progress=False)
    (folder / "part0.jsonl").write_text('{"text": "ok"}\n{"text": 3}\n')
    with pytest.raises(CorpusError, match=r"part0.jsonl:2: expected a JSON object"):
        link_corpus(str(folder), tmp_path / "out2", settings, docs_per_shard=5, progress=False)


def test_the_link_command_links_a_corpus(settings, tmp_path):
    folder = _write_corpus(tmp_path / "in", n_files=1)
    common = ["--ner", settings.ner, "--model", settings.model, "--index", settings.index, "--threshold", "0"]
    result = runner.invoke(app, ["link", "--input", str(folder / "*.jsonl"), "--output", str(tmp_path / "out"),
                                 "--docs-per-shard", "4", *common])
    assert result.exit_code == 0, result.output
    assert "Linked 7 documents" in said(result) and "0 of 2 shards were complete already" in said(result)
    assert _shards(tmp_path / "out") == _single_process(settings, folder)
    result = runner.invoke(app, ["link", "--input", str(folder / "part0.jsonl"), "--engine", "ray", *common])
    assert result.exit_code == 1 and "apply to a corpus" in said(result)
    result = runner.invoke(app, ["link", "--input", str(folder), *common])
    assert result.exit_code == 1 and "give --output OUT_DIR" in said(result)


def test_parquet_shards_hold_the_same_records(settings, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    folder = _write_corpus(tmp_path / "in", n_files=1)
    parquet = LinkSettings(**{**settings.__dict__, "output_format": "parquet"})
    link_corpus(str(folder), tmp_path / "out", parquet, docs_per_shard=4, progress=False)
    rows = [r for path in sorted((tmp_path / "out").glob("*.parquet")) for r in pq.read_table(path).to_pylist()]
    expected = [json.loads(line) for line in _single_process(settings, folder)]
    assert [r["id"] for r in rows] == [r["id"] for r in expected]
    for row, record in zip(rows, expected):
        assert row["entities"] == [{**e, "candidates": [{"cui": c, "score": s} for c, s in e["candidates"]]}
                                   for e in record["entities"]]


# Ray: the bar of the corpus issue, on 300 BC5CDR dev abstracts with the bundled pipeline.
needs_ray_and_data = pytest.mark.skipif(
    not (SHARED_DATA / "bc5cdr").exists() or not __import__("importlib").util.find_spec("ray"),
    reason="needs ../shared/data and ray")


@pytest.fixture(scope="module")
def abstracts(tmp_path_factory):
    from spacy_sapbert_training.data.datasets import load_pubtator_split

    folder = tmp_path_factory.mktemp("bc5cdr") / "in"
    folder.mkdir()
    docs = load_pubtator_split("bc5cdr-disease", "dev", SHARED_DATA).documents[:300]
    for part in range(3):
        lines = [json.dumps({"id": d.doc_id, "text": d.text}) for d in docs[part * 100:(part + 1) * 100]]
        (folder / f"dev{part}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    single = folder.parent / "single.jsonl"
    (folder.parent / "all.jsonl").write_text("".join((folder / f"dev{p}.jsonl").read_text() for p in range(3)))
    result = runner.invoke(app, ["link", "--input", str(folder.parent / "all.jsonl"), "--output", str(single)])
    assert result.exit_code == 0, result.output
    return folder, single.read_text(encoding="utf-8").splitlines()


def _link_command(folder, out, *extra):
    return [sys.executable, "-m", "spacy_sapbert.cli", "link", "--input", str(folder / "*.jsonl"),
            "--output", str(out), "--engine", "ray", "--workers", "2", *extra]


@pytest.mark.slow  # 70 s: starts a Ray cluster of two workers
@needs_ray_and_data
def test_a_two_worker_ray_run_writes_what_one_process_writes(abstracts, tmp_path):
    folder, single = abstracts
    done = subprocess.run(_link_command(folder, tmp_path / "out", "--docs-per-shard", "40"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _shards(tmp_path / "out") == single and len(single) == 300


# A Ray cluster killed midway and started again: 90 s of the suite on 2 busy cores, so it runs
# with `make test-slow`; the local engine's resume is tested above on every run.
@pytest.mark.slow
@needs_ray_and_data
def test_a_killed_ray_run_resumes_with_no_document_lost_or_doubled(abstracts, tmp_path):
    folder, single = abstracts
    out = tmp_path / "out"
    command = _link_command(folder, out, "--docs-per-shard", "10")
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while len(list((out / "_shards").glob("*.json"))) < 4 and time.time() < deadline and job.poll() is None:
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)  # the driver, its local Ray cluster and workers, midway
    job.wait()
    finished = len(list((out / "_shards").glob("*.json")))
    assert 4 <= finished < 30
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Workers busy at the kill may still have finished their shard: those count as complete.
    linked, complete = re.search(r"Linked (\d+) documents.*; (\d+) of 30 shards were complete", " ".join(done.stdout.split())).groups()
    assert int(complete) >= finished and int(linked) == 300 - 10 * int(complete)
    assert _shards(out) == single


def test_link_says_what_the_bundled_ner_covers_when_it_finds_nothing_or_is_unsure():
    from collections import Counter

    from spacy_sapbert.corpus.shards import outside_hint

    assert outside_hint(Counter(documents=3), None) is None
    hint = outside_hint(Counter(documents=3, empty=2, unsure=1), None)
    assert hint.startswith("2 of 3 documents with text yielded no linked entity and 1 entities were found with low "
                           "confidence: ")
    assert "--ner" in hint and "\n" not in hint
    # a user's own NER is theirs to judge
    assert outside_hint(Counter(documents=3, empty=3), "en_ner_bc5cdr_md") is None
