"""The training objective, config, batches and loop: brute-force checks, a loss that falls,
exact resume after SIGKILL, and DDP on two CPU processes."""
import itertools
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spacy_sapbert.encoders.settings import read_settings
from spacy_sapbert_training.trainer.batches import PairBatches
from spacy_sapbert_training.trainer.checkpoint import latest_checkpoint
from spacy_sapbert_training.trainer.config import TrainConfig, TrainingConfigError, parse_overrides
from spacy_sapbert_training.trainer.loop import Trainer, lr_factor
from spacy_sapbert_training.trainer.objective import (
    MiningConfig,
    MultiSimilarityConfig,
    ObjectiveConfig,
    ObjectiveError,
    SelfAlignmentObjective,
)

REPO = Path(__file__).resolve().parents[2]


def random_batch(seed=0, n_concepts=6, per_concept=4, dim=8):
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(n_concepts * per_concept, dim, generator=generator)
    labels = torch.arange(n_concepts).repeat_interleave(per_concept)
    return embeddings, labels


def brute_force_triplets(embeddings, labels, margin):
    """Every (anchor, positive, negative) whose negative is not `margin` farther than the
    positive, in Euclidean distance between unit vectors."""
    unit = torch.nn.functional.normalize(embeddings, dim=1).double()
    found = set()
    n = len(labels)
    for a, p, q in itertools.product(range(n), repeat=3):
        if a == p or labels[a] != labels[p] or labels[q] == labels[a]:
            continue
        if (unit[a] - unit[q]).norm() - (unit[a] - unit[p]).norm() <= margin:
            found.add((a, p, q))
    return found


def brute_force_ms_loss(embeddings, triplets, alpha, beta, base):
    """Multi-Similarity loss over the pairs the triplets contain, averaged over all anchors."""
    unit = torch.nn.functional.normalize(embeddings, dim=1).double()
    sim = unit @ unit.T
    n = len(embeddings)
    positives = {(a, p) for a, p, _ in triplets}
    negatives = {(a, q) for a, _, q in triplets}
    total = 0.0
    for i in range(n):
        pos = [float(sim[i, j]) for (a, j) in positives if a == i]
        neg = [float(sim[i, j]) for (a, j) in negatives if a == i]
        total += math.log(1 + sum(math.exp(-alpha * (s - base)) for s in pos)) / alpha
        total += math.log(1 + sum(math.exp(beta * (s - base)) for s in neg)) / beta
    return total / n


@pytest.mark.parametrize("margin", [0.0, 0.2, 1.0])
def test_miner_keeps_exactly_the_margin_violating_triplets(margin):
    embeddings, labels = random_batch()
    objective = SelfAlignmentObjective(ObjectiveConfig(mining=MiningConfig(margin=margin)))
    a, p, n = objective.miner(embeddings, labels)
    mined = set(zip(a.tolist(), p.tolist(), n.tolist()))
    assert mined == brute_force_triplets(embeddings, labels, margin)
    assert len(mined) == len(a)  # no duplicates


@pytest.mark.parametrize("constants", [(2.0, 50.0, 0.5), (1.0, 60.0, 0.5)])
def test_multi_similarity_loss_matches_brute_force(constants):
    alpha, beta, base = constants
    embeddings, labels = random_batch(seed=1)
    objective = SelfAlignmentObjective(ObjectiveConfig(multi_similarity=MultiSimilarityConfig(alpha=alpha, beta=beta, base=base)))
    loss, n_triplets = objective(embeddings, labels)
    triplets = brute_force_triplets(embeddings, labels, 0.2)
    assert n_triplets == len(triplets) > 0
    assert float(loss) == pytest.approx(brute_force_ms_loss(embeddings, triplets, alpha, beta, base), rel=1e-5)


def test_loss_without_miner_uses_every_pair():
    embeddings, labels = random_batch(seed=2)
    loss, n_triplets = SelfAlignmentObjective(ObjectiveConfig(mining=MiningConfig(miner="none")))(embeddings, labels)
    n = len(labels)
    every = {(a, p, q) for a, p, q in itertools.product(range(n), repeat=3)
             if a != p and labels[a] == labels[p] and labels[q] != labels[a]}
    assert n_triplets == -1
    assert float(loss) == pytest.approx(brute_force_ms_loss(embeddings, every, 1.0, 60.0, 0.5), rel=1e-5)


def test_a_batch_that_meets_the_margin_mines_nothing_and_costs_nothing():
    labels = torch.tensor([0, 0, 1, 1])
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    loss, n_triplets = SelfAlignmentObjective(ObjectiveConfig())(embeddings, labels)
    assert n_triplets == 0 and float(loss) == 0.0


def test_unknown_loss_or_miner_is_refused():
    with pytest.raises(ObjectiveError, match=r"Unknown \[objective\] loss 'arcface'"):
        SelfAlignmentObjective(ObjectiveConfig(loss="arcface"))
    with pytest.raises(ObjectiveError, match=r"Unknown \[objective.mining\] miner \(or 'none'\) 'random'; use one of triplet_margin"):
        SelfAlignmentObjective(ObjectiveConfig(mining=MiningConfig(miner="random")))


# -- config ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pretrain.cfg", "pretrain-paper.cfg", "finetune.cfg"])
def test_shipped_configs_load_with_overrides(name):
    config = TrainConfig.from_disk(REPO / "configs" / name, {"training.max_steps": 2, "model.name_or_path": "x"})
    assert config.training.max_steps == 2 and config.model.name_or_path == "x"
    assert config.objective.mining.margin == 0.2


def test_paper_and_official_constants_differ_only_in_alpha_beta():
    official = TrainConfig.from_disk(REPO / "configs" / "pretrain.cfg").to_dict()
    paper = TrainConfig.from_disk(REPO / "configs" / "pretrain-paper.cfg").to_dict()
    official_ms, paper_ms = official["objective"]["multi_similarity"], paper["objective"]["multi_similarity"]
    assert (official_ms["alpha"], official_ms["beta"]) == (1.0, 60.0)
    assert (paper_ms["alpha"], paper_ms["beta"]) == (2.0, 50.0)
    paper_ms.update(alpha=1.0, beta=60.0)
    assert paper == official


def test_config_errors_name_the_file_and_setting(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("[training]\nbatchsize = 3\n")
    with pytest.raises(TrainingConfigError, match=r"bad.cfg: \[training\] has no setting 'batchsize'"):
        TrainConfig.from_disk(bad)
    bad.write_text("[trainer]\nseed = 1\n")
    with pytest.raises(TrainingConfigError, match=r"unknown section \[trainer\]"):
        TrainConfig.from_disk(bad)
    bad.write_text("[training]\namp = \"fp8\"\n")
    with pytest.raises(TrainingConfigError, match="amp must be one of"):
        TrainConfig.from_disk(bad)
    # A setting written in [objective] that belongs in one of its parts is sent there.
    bad.write_text("[objective]\nloss = \"synonym_marginal\"\ntau = 0.1\n")
    with pytest.raises(TrainingConfigError, match=r"\[objective\] has no setting 'tau'; it belongs in \[objective.marginal\]"):
        TrainConfig.from_disk(bad)
    bad.write_text("[objective]\nloss = \"synonym_marginal\"\n")
    config = TrainConfig.from_disk(bad, {"objective.prototypes.pool": 5})  # a part the file leaves out
    assert config.objective.prototypes.pool == 5


# -- batches -----------------------------------------------------------------------------

def make_pairs(n_concepts=10, per_concept=3):
    return [(f"C{c}", f"name {c} {i}", f"other {c} {i}") for c in range(n_concepts) for i in range(per_concept)]


def test_batches_are_a_function_of_seed_and_index():
    pairs = make_pairs()
    first, second = PairBatches(pairs, 4, seed=3), PairBatches(pairs, 4, seed=3)
    for index in [5, 0, 17, 5]:
        names_a, labels_a = first[index]
        names_b, labels_b = second[index]
        assert names_a == names_b and torch.equal(labels_a, labels_b)
    assert first[0][0] != PairBatches(pairs, 4, seed=4)[0][0]


def test_an_epoch_visits_each_pair_once_and_names_carry_their_concept():
    pairs = make_pairs()
    batches = PairBatches(pairs, 5, seed=0)
    seen = []
    for index in range(batches.per_epoch):
        names, labels = batches[index]
        half = len(names) // 2
        seen += names[:half]
        for name, other, label in zip(names[:half], names[half:], labels[:half]):
            assert name.split()[1] == other.split()[1]
            assert torch.equal(labels[: half], labels[half:])
    assert sorted(seen) == sorted(p[1] for p in pairs)


def test_ranks_split_each_global_batch_without_overlap():
    pairs = make_pairs()
    ranks = [PairBatches(pairs, 3, seed=0, rank=r, world_size=2) for r in range(2)]
    single = PairBatches(pairs, 6, seed=0)
    for index in range(3):
        together = ranks[0][index][0][:3] + ranks[1][index][0][:3]
        assert sorted(together) == sorted(single[index][0][:6])


# -- the loop ----------------------------------------------------------------------------

def tiny_config(tiny_model, **training):
    settings = dict(batch_size=64, max_steps=20, lr=1e-3, log_every=1, save_every=100, device="cpu", seed=0)
    settings.update(training)
    return TrainConfig.from_dict({
        "model": {"name_or_path": str(tiny_model), "pooling": "mean"},
        "training": settings,
    })


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_twenty_steps_on_a_fixed_batch_lower_the_loss(tiny_model, tiny_pairs, tmp_path):
    # One batch holds every pair, so each step sees the same names; a random tiny BERT
    # starts with all names alike and needs a large rate to separate them in 20 steps.
    final = Trainer(tiny_config(tiny_model, lr=1e-2), tiny_pairs, tmp_path).train()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 21))
    first, last = rows[:5], rows[-5:]
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert sum(r["loss"] for r in last) < 0.98 * sum(r["loss"] for r in first)
    assert sum(r["triplets"] for r in last) < sum(r["triplets"] for r in first)
    record = read_settings(final)["training"]
    assert record["steps"] == 20 and record["n_concepts"] == 10
    # The saved model links with the runtime encoder and keeps its pooling.
    from spacy_sapbert.encoders.transformer import TorchEncoder

    encoder = TorchEncoder(final)
    assert encoder.pooling == "mean" and encoder.encode(["diabetes"]).shape == (1, 32)


RUN_SCRIPT = """
import os, signal, sys
import torch
torch.set_num_threads(1)
from spacy_sapbert_training.trainer.config import TrainConfig
from spacy_sapbert_training.trainer.loop import Trainer
model, pairs, output, mode = sys.argv[1:5]
config = TrainConfig.from_dict({{
    "model": {{"name_or_path": model, "pooling": "mean"}},
    "training": dict(batch_size=8, grad_accum=2, max_steps=8, lr=1e-3, save_every=2, log_every=1,
                     device="cpu", seed=7, schedule="linear", warmup_steps=2,
                     max_minutes=1e-9 if mode == "slices" else 0),
}})
def die(step, loss):
    if mode == "kill" and step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
if mode == "slices":  # each call trains one step, as a time-limited job trains a slice per call
    calls = 0
    while True:
        trainer = Trainer(config, pairs, output)
        trainer.train(resume=True)
        calls += 1
        if not trainer.stopped_early:
            break
    print("calls", calls)
else:
    Trainer(config, pairs, output, step_callback=die).train(resume=mode == "resume")
"""


def run_script(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", RUN_SCRIPT.format(), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=REPO)


@pytest.mark.slow  # 50 s on 2 cores: test_a_run_trained_in_timed_slices_ends_as_an_uninterrupted_one checks resuming in the fast suite
def test_a_run_killed_with_sigkill_resumes_to_the_same_weights(tiny_model, tiny_pairs, tmp_path):
    from safetensors.torch import load_file

    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert run_script(tiny_model, tiny_pairs, whole, "full").returncode == 0
    killed = run_script(tiny_model, tiny_pairs, broken, "kill")
    assert killed.returncode == -signal.SIGKILL
    assert latest_checkpoint(broken).name == "step-00000004"
    assert not (broken / "model").exists()
    resumed = run_script(tiny_model, tiny_pairs, broken, "resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = load_file(whole / "model" / "model.safetensors")
    got = load_file(broken / "model" / "model.safetensors")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    # The killed run's metric lines after its checkpoint are replaced, not doubled.
    timing = ("steps_per_s", "elapsed_s")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]
    assert strip(read_metrics(broken)) == strip(read_metrics(whole))
    # Only the most recent checkpoints are kept.
    assert sorted(p.name for p in (broken / "checkpoints").iterdir()) == ["step-00000006", "step-00000008"]


def test_a_run_trained_in_timed_slices_ends_as_an_uninterrupted_one(tiny_model, tiny_pairs, tmp_path):
    from safetensors.torch import load_file

    whole, sliced = tmp_path / "whole", tmp_path / "sliced"
    assert run_script(tiny_model, tiny_pairs, whole, "full").returncode == 0
    result = run_script(tiny_model, tiny_pairs, sliced, "slices")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "calls 8" in result.stdout
    expected = load_file(whole / "model" / "model.safetensors")
    got = load_file(sliced / "model" / "model.safetensors")
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    timing = ("steps_per_s", "elapsed_s")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]
    assert strip(read_metrics(sliced)) == strip(read_metrics(whole))


def test_linear_schedule_warms_up_then_falls_to_zero():
    linear = lr_factor(warmup_steps=2, schedule="linear", max_steps=6)
    assert [linear(s) for s in range(7)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    constant = lr_factor(warmup_steps=0, schedule="constant", max_steps=6)
    assert {constant(s) for s in range(7)} == {1.0}


def test_overrides_parse_as_json_else_strings():
    parsed = parse_overrides(["--training.lr", "1e-4", "--training.amp=bf16", "--training.compile",
                              "--model.max-length", "30"])
    assert parsed == {"training.lr": 1e-4, "training.amp": "bf16", "training.compile": True,
                      "model.max_length": 30}
    with pytest.raises(TrainingConfigError, match="--section.setting value"):
        parse_overrides(["lr", "1"])


BLOCKED = ("spacy", "faiss", "thinc", "onnxruntime")
BARE_MACHINE = """
import importlib.machinery, runpy, sys
class Hide(importlib.machinery.PathFinder):  # as if these packages were not installed
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path = [Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
sys.argv = ["pretrain"] + sys.argv[1:]
runpy.run_module("spacy_sapbert_training.trainer.pretrain", run_name="__main__")
"""


def test_training_runs_without_spacy_or_faiss(tiny_model, tiny_pairs, tmp_path):
    # A GPU machine set up for training only may have torch and transformers but neither spaCy nor FAISS.
    cmd = [sys.executable, "-c", BARE_MACHINE.format(blocked=BLOCKED), "--pairs", str(tiny_pairs),
           "--output", str(tmp_path), "--model", str(tiny_model), "--model.pooling", "mean",
           "--training.device", "cpu", "--training.batch_size", "8", "--training.max_steps", "2"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training" in read_settings(tmp_path / "model")


def test_resume_with_another_process_count_is_refused(tiny_model, tiny_pairs, tmp_path):
    Trainer(tiny_config(tiny_model, max_steps=2, save_every=1), tiny_pairs, tmp_path).train()
    state_file = latest_checkpoint(tmp_path) / "state.pt"
    state = torch.load(state_file, weights_only=False)
    state["world_size"] = 4
    torch.save(state, state_file)
    _rewrite_manifest(state_file.parent)  # a genuine checkpoint of 4 processes, not a damaged one
    with pytest.raises(TrainingConfigError, match="written by 4 processes, not 1"):
        Trainer(tiny_config(tiny_model, max_steps=3), tiny_pairs, tmp_path).train(resume=True)


def test_two_process_ddp_on_cpu(tiny_model, tiny_pairs, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531",
           "-m", "spacy_sapbert_training.trainer.pretrain", "--pairs", str(tiny_pairs), "--output", str(tmp_path),
           "--model", str(tiny_model), "--model.pooling", "mean", "--training.device", "cpu",
           "--training.batch_size", "4", "--training.max_steps", "3", "--training.save_every", "2",
           "--training.log_every", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = read_settings(tmp_path / "model")["training"]
    assert record["hardware"].startswith("2 ×") and record["names_per_step"] == 2 * 4 * 2
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    state = torch.load(tmp_path / "checkpoints" / "step-00000002" / "state.pt", weights_only=False)
    assert state["world_size"] == 2 and len(state["rng"]) == 2


def test_package_writes_fp16_weights_a_card_and_loads_for_linking(tiny_model, tiny_pairs, tmp_path):
    from safetensors.torch import load_file

    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert_training.trainer.package import package_model

    final = Trainer(tiny_config(tiny_model, max_steps=2), tiny_pairs, tmp_path / "run").train()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "summary.md").write_text("# Evaluation summary\n\n| ncbi-disease | dev | 90.0 |\n")
    packaged = package_model(final, tmp_path / "package", metrics)
    weights = load_file(packaged / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float16}
    card = (packaged / "MODEL_CARD.md").read_text()
    assert "Steps: 2 of 128 texts" in card and "| ncbi-disease | dev | 90.0 |" in card and "Apache-2.0" in card
    fp32, fp16 = TorchEncoder(final), TorchEncoder(packaged)
    assert fp16.pooling == "mean"
    assert float((fp32.encode(["lactic acidosis"]) * fp16.encode(["lactic acidosis"])).sum()) > 0.99


def _rewrite_manifest(checkpoint):
    from spacy_sapbert_training.trainer.checkpoint import MANIFEST_FILE
    from spacy_sapbert.cache import file_records

    files = sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(file_records(checkpoint, files)))


@pytest.mark.parametrize("damage", ["truncated state", "empty state", "overwritten weights"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(tiny_model, tiny_pairs, tmp_path, caplog, damage):
    reference = Trainer(tiny_config(tiny_model, max_steps=4, save_every=2), tiny_pairs, tmp_path / "ref").train()
    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model, max_steps=4, save_every=1, keep_checkpoints=2), tiny_pairs, run).train()
    latest = latest_checkpoint(run)
    assert latest.name == "step-00000004"
    if damage == "truncated state":
        data = (latest / "state.pt").read_bytes()
        (latest / "state.pt").write_bytes(data[: len(data) // 2])
    elif damage == "empty state":
        (latest / "state.pt").write_bytes(b"")
    else:
        weights = next((latest / "model").glob("*.safetensors"))
        data = bytearray(weights.read_bytes())
        data[-300:-100] = bytes(200)
        weights.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="spacy_sapbert_training.trainer.checkpoint"):
        final = Trainer(tiny_config(tiny_model, max_steps=4, save_every=1, keep_checkpoints=2), tiny_pairs, run).train(resume=True)
    assert any("step-00000004 is damaged" in r.message for r in caplog.records)
    from safetensors.torch import load_file

    ours, theirs = load_file(next(final.glob("*.safetensors"))), load_file(next(reference.glob("*.safetensors")))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)  # resumed from step 3 to the same weights


def test_resume_refuses_other_settings_and_data_unless_allowed(tiny_model, tiny_pairs, tmp_path):
    Trainer(tiny_config(tiny_model, max_steps=2, save_every=1), tiny_pairs, tmp_path).train()
    with pytest.raises(TrainingConfigError, match=r"training.batch_size was 64 in the checkpoint and is 32 now"):
        Trainer(tiny_config(tiny_model, max_steps=3, batch_size=32), tiny_pairs, tmp_path).train(resume=True)
    with pytest.raises(TrainingConfigError, match=r"max_steps 1 is below the checkpoint's step 2"):
        Trainer(tiny_config(tiny_model, max_steps=1), tiny_pairs, tmp_path).train(resume=True)
    other = tmp_path / "other_pairs.txt"
    other.write_text(tiny_pairs.read_text() + "X1||extra name||another name\n")
    with pytest.raises(TrainingConfigError, match=r"the checkpoint trained on"):
        Trainer(tiny_config(tiny_model, max_steps=3), other, tmp_path).train(resume=True)
    allowed = tiny_config(tiny_model, max_steps=3, batch_size=32, allow_changed_resume=True)
    assert Trainer(allowed, tiny_pairs, tmp_path).train(resume=True).exists()


def brute_force_ms_loss_margins(embeddings, triplets, alpha, beta, margins):
    """The Multi-Similarity loss with per-pair margins: margins(i, j, similarity) → (λp, λn)."""
    unit = torch.nn.functional.normalize(embeddings, dim=1).double()
    sim = unit @ unit.T
    positives = {(a, p) for a, p, _ in triplets}
    negatives = {(a, q) for a, _, q in triplets}
    total = 0.0
    for i in range(len(embeddings)):
        pos = [math.exp(-alpha * (float(sim[i, j]) - margins(i, j, float(sim[i, j]))[0])) for a, j in positives if a == i]
        neg = [math.exp(beta * (float(sim[i, j]) - margins(i, j, float(sim[i, j]))[1])) for a, j in negatives if a == i]
        total += math.log(1 + sum(pos)) / alpha + math.log(1 + sum(neg)) / beta
    return total / len(embeddings)


def test_multi_similarity_v2_splits_the_margins():
    """v2 (CL+KGE): λp = 1 for positives, λn = 0.5 for negatives; with λp = λn it is v1."""
    embeddings, labels = random_batch(seed=3)
    config = ObjectiveConfig(loss="multi_similarity_v2", multi_similarity=MultiSimilarityConfig(
        alpha=2.0, beta=50.0, pos_margin=1.0, neg_margin=0.5))
    loss, n_triplets = SelfAlignmentObjective(config)(embeddings, labels)
    triplets = brute_force_triplets(embeddings, labels, 0.2)
    expected = brute_force_ms_loss_margins(embeddings, triplets, 2.0, 50.0, lambda i, j, s: (1.0, 0.5))
    assert n_triplets == len(triplets) and float(loss) == pytest.approx(expected, rel=1e-5)
    same = ObjectiveConfig(loss="multi_similarity_v2", multi_similarity=MultiSimilarityConfig(
        alpha=2.0, beta=50.0, pos_margin=0.5, neg_margin=0.5))
    v1 = ObjectiveConfig(multi_similarity=MultiSimilarityConfig(alpha=2.0, beta=50.0, base=0.5))
    assert float(SelfAlignmentObjective(same)(embeddings, labels)[0]) == pytest.approx(
        float(SelfAlignmentObjective(v1)(embeddings, labels)[0]), rel=1e-6)


def test_multi_similarity_v3_takes_each_pairs_margins_from_kge(tmp_path):
    """v3: λp = |S - S_KGE| and λn = 1 - |S - S_KGE|, S_KGE the cosine of the two concepts' KGE
    vectors (looked up by concept id; a concept without one has S_KGE 0)."""
    import numpy as np

    embeddings, labels = random_batch(seed=4)
    concept_ids = [f"C{i}" for i in range(int(labels.max()) + 1)]
    kge = np.random.default_rng(4).normal(size=(len(concept_ids) - 1, 5)).astype(np.float32)
    np.savez(tmp_path / "kge.npz", ids=np.array(concept_ids[:-1]), vectors=kge)  # the last has none
    config = ObjectiveConfig(loss="multi_similarity_v3", multi_similarity=MultiSimilarityConfig(
        alpha=2.0, beta=50.0, kge_vectors=str(tmp_path / "kge.npz")))
    loss, _ = SelfAlignmentObjective(config, concept_ids)(embeddings, labels)
    unit = kge / np.linalg.norm(kge, axis=1, keepdims=True)
    table = np.vstack([unit, np.zeros((1, 5), dtype=np.float32)])

    def margins(i, j, s):
        gap = abs(s - float(table[labels[i]] @ table[labels[j]]))
        return gap, 1 - gap

    triplets = brute_force_triplets(embeddings, labels, 0.2)
    assert float(loss) == pytest.approx(brute_force_ms_loss_margins(embeddings, triplets, 2.0, 50.0, margins), rel=1e-4)
    with pytest.raises(Exception, match="kge_vectors"):
        SelfAlignmentObjective(ObjectiveConfig(loss="multi_similarity_v3"), concept_ids)


def test_kge_alignment_draws_name_cosines_to_kge_cosines(tmp_path):
    """KGE-injected stage: mean over name pairs i != j, both concepts embedded, of (S - S_KGE)^2."""
    import numpy as np

    embeddings, labels = random_batch(seed=5)
    concept_ids = [f"C{i}" for i in range(int(labels.max()) + 1)]
    kge = np.random.default_rng(5).normal(size=(len(concept_ids) - 1, 5)).astype(np.float32)
    np.savez(tmp_path / "kge.npz", ids=np.array(concept_ids[:-1]), vectors=kge)  # the last has none
    config = ObjectiveConfig(loss="kge_alignment", mining=MiningConfig(miner="none"),
                             multi_similarity=MultiSimilarityConfig(kge_vectors=str(tmp_path / "kge.npz")))
    loss, mined = SelfAlignmentObjective(config, concept_ids)(embeddings, labels)
    unit = kge / np.linalg.norm(kge, axis=1, keepdims=True)
    e = embeddings.numpy() / np.linalg.norm(embeddings.numpy(), axis=1, keepdims=True)
    terms = [(float(e[i] @ e[j]) - float(unit[labels[i]] @ unit[labels[j]])) ** 2
             for i in range(len(labels)) for j in range(len(labels))
             if i != j and labels[i] < len(unit) and labels[j] < len(unit)]
    assert mined == -1 and float(loss) == pytest.approx(sum(terms) / len(terms), rel=1e-5)


def test_prototype_batches_mine_the_nearest_other_concepts_names(tiny_pairs):
    """CODER++ batches: per concept, prototypes + positives of it (other synonyms first), then the
    names of other concepts nearest the prototypes' mean in the index the model last refreshed."""
    import numpy as np

    from spacy_sapbert_training.trainer.batches import PrototypeBatches
    from spacy_sapbert_training.data.pairs import read_pairs

    batches = PrototypeBatches(read_pairs(tiny_pairs), concepts=2, prototypes=1, positives=3, negatives=4, seed=0)
    vectors = np.random.default_rng(0).normal(size=(len(batches.names), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    batches.refresh(vectors)
    names, labels = batches[3]
    assert names == batches[3][0]  # a pure function of (seed, index) and the index
    assert len(names) == 2 * (1 + 3 + 4) and len(set(labels[:4].tolist())) == 1
    first = labels[0].item()
    prototype = batches.names.index(names[0])
    others = [r for r in np.argsort(-(vectors @ vectors[prototype])) if batches.name_label[r] != first][:4]
    assert names[4:8] == [batches.names[r] for r in others]
    assert all(labels[4:8] != first)


def test_a_prototype_run_refreshes_its_negatives_and_trains(tiny_model, tiny_pairs, tmp_path):
    config = tiny_config(tiny_model, max_steps=4)
    config.objective.batch_source = "prototypes"
    config.objective.prototypes.negatives_refresh_every = 2
    config.objective.prototypes.positives, config.objective.prototypes.hard_negatives = 3, 4
    trainer = Trainer(config, tiny_pairs, tmp_path)
    refreshed = []
    original = trainer._refresh
    trainer._refresh = lambda run: (refreshed.append(run.step), original(run))
    final = trainer.train()
    assert refreshed == [0, 2]
    record = read_settings(final)["training"]
    assert record["hard_negatives"] == 4 and record["names_per_step"] == 4 * (2 + 3 + 4)


# -- registered parts --------------------------------------------------------------------

@pytest.fixture
def centroid_loss():
    """A loss registered for one test, as a user registers one: each name's squared distance to
    its concept's mean (unit vectors), which no built-in loss computes. RETURNS the values the
    loss returned, in order."""
    import catalogue

    from spacy_sapbert_training.trainer.registry import losses

    returned = []

    class CentroidLoss(torch.nn.Module):
        def forward(self, embeddings, labels, indices_tuple=None):
            unit = torch.nn.functional.normalize(embeddings, dim=1)
            sums = torch.zeros(int(labels.max()) + 1, unit.shape[1]).index_add(0, labels, unit)
            means = sums / torch.bincount(labels).clamp(min=1).unsqueeze(1)
            loss = ((unit - means[labels]) ** 2).sum(1).mean()
            returned.append(float(loss.detach()))
            return loss

    @losses.register("test_centroid")
    def centroid(config, concept_ids):
        return CentroidLoss()

    yield returned
    del catalogue.REGISTRY[(*losses.namespace, "test_centroid")]


def test_a_registered_loss_is_chosen_by_its_config_entry_and_trains(centroid_loss, tiny_model, tiny_pairs, tmp_path):
    recipe = tmp_path / "centroid.cfg"
    recipe.write_text(f'[model]\nname_or_path = "{tiny_model}"\npooling = "mean"\n\n'
                      '[objective]\nloss = "test_centroid"\n\n[objective.mining]\nminer = "none"\n\n'
                      '[training]\nbatch_size = 8\nmax_steps = 2\nlog_every = 1\ndevice = "cpu"\n')
    final = Trainer(TrainConfig.from_disk(recipe), tiny_pairs, tmp_path / "run").train()
    rows = read_metrics(tmp_path / "run")
    assert len(centroid_loss) == 2 and [r["loss"] for r in rows] == [round(v, 6) for v in centroid_loss]
    assert [r["triplets"] for r in rows] == [-1, -1]  # miner "none": every pair, nothing mined
    assert (final / "model.safetensors").exists()


def test_an_unknown_loss_is_refused_in_one_sentence_naming_the_registered_ones(tiny_model, tiny_pairs, tmp_path):
    config = tiny_config(tiny_model)
    config.objective.loss = "arcface"
    registered = "distill, kge_alignment, multi_similarity, multi_similarity_v2, multi_similarity_v3, synonym_marginal"
    with pytest.raises(ObjectiveError, match=rf"^Unknown \[objective\] loss 'arcface'; use one of {registered}, "
                                             r"or register one with [\w.]+\.$"):
        Trainer(config, tiny_pairs, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_batch_source_must_be_registered_and_give_what_the_loss_scores(tiny_model, tiny_pairs, tmp_path):
    config = tiny_config(tiny_model)
    config.objective.batch_source = "triplets"
    with pytest.raises(TrainingConfigError, match=r"Unknown \[objective\] batch_source 'triplets'; use one of "
                                                  r"keys, pairs, prototypes, texts,"):
        Trainer(config, tiny_pairs, tmp_path)
    config.objective.batch_source = "keys"
    with pytest.raises(TrainingConfigError, match="batch_source 'keys' gives queries against key sets, which loss "
                                                  "'multi_similarity' does not score"):
        Trainer(config, tiny_pairs, tmp_path, keys=[tmp_path])
    config.objective.batch_source = "texts"
    with pytest.raises(TrainingConfigError, match="batch_source 'texts' gives texts with a teacher's vectors, which "
                                                  "loss 'multi_similarity' does not score"):
        Trainer(config, tiny_pairs, tmp_path)
