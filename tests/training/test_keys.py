"""Training against frozen keys: the synonym-marginal loss against a brute-force re-computation,
key sets on disk, their batches, and a run whose model answers to the keys' model."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_sapbert.encoders.settings import read_settings, write_settings
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert_training.data.keys import (
    KeySetError,
    embed_keyset,
    kb_keyset,
    ontology_queries,
    read_keyset,
    typo_queries,
    write_keyset,
    xref_concept,
)
from spacy_sapbert_training.data.protocol import TextNormaliser
from spacy_sapbert_training.trainer.batches import QueryBatches
from spacy_sapbert_training.trainer.config import TrainConfig, TrainingConfigError
from spacy_sapbert_training.trainer.loop import Trainer
from spacy_sapbert_training.trainer.objective import KeyTargets, ObjectiveError, SynonymMarginalLoss


def unit(rows):
    return torch.nn.functional.normalize(torch.as_tensor(rows, dtype=torch.float32), dim=-1)


def brute_force_marginal(queries, keys, positives, own, tau, own_rows="exclude", top_k=0):
    """−log of the softmax mass on the positive keys, one query at a time, in plain Python."""
    total = 0.0
    for q, pos, mine in zip(queries.tolist(), positives, own):
        scores = {j: sum(a * b for a, b in zip(q, k)) / tau for j, k in enumerate(keys.tolist())}
        if own_rows == "exclude":
            scores = {j: s for j, s in scores.items() if j not in mine}
            pos = [j for j in pos if j not in mine]
        if top_k:
            best = sorted(scores, key=scores.get, reverse=True)[:top_k]
            scores = {j: s for j, s in scores.items() if j in best or j in pos}
        every = sum(math.exp(s) for s in scores.values())
        total += -math.log(sum(math.exp(scores[j]) for j in pos) / every)
    return total / len(positives)


@pytest.fixture
def problem():
    generator = torch.Generator().manual_seed(0)
    keys = unit(torch.randn(12, 6, generator=generator))
    queries = torch.randn(4, 6, generator=generator)
    positives = [[0, 1, 2], [3, 4], [5, 6, 7], [8]]
    own = [[1], [], [5, 9], [2]]
    targets = KeyTargets(0, [torch.tensor(p, dtype=torch.long) for p in positives],
                         [torch.tensor(o, dtype=torch.long) for o in own])
    return keys, queries, positives, own, targets


@pytest.mark.parametrize("own_rows", ["exclude", "positive"])
@pytest.mark.parametrize("top_k", [0, 3])
def test_marginal_loss_matches_brute_force(problem, own_rows, top_k):
    keys, queries, positives, own, targets = problem
    loss, hits = SynonymMarginalLoss([keys], tau=0.1, top_k=top_k, own_rows=own_rows)(queries, targets)
    expected = brute_force_marginal(unit(queries), keys, positives, own, 0.1, own_rows, top_k)
    assert float(loss) == pytest.approx(expected, rel=1e-4)
    assert 0 <= hits <= len(positives)


def test_own_rows_are_left_out_of_both_sides(problem):
    keys, _, _, _, _ = problem
    # The query sits on its own row (1), which is excluded: moving that row changes nothing.
    query = keys[1:2] * 5
    targets = KeyTargets(0, [torch.tensor([0, 1, 2])], [torch.tensor([1])])
    moved = keys.clone()
    moved[1] = -moved[1]
    first = SynonymMarginalLoss([keys], tau=0.1)(query, targets)[0]
    assert float(first) == pytest.approx(float(SynonymMarginalLoss([moved], tau=0.1)(query, targets)[0]))
    kept = SynonymMarginalLoss([keys], tau=0.1, own_rows="positive")(query, targets)[0]
    assert float(kept) < float(first)  # counted as a positive, the own row makes the query right


def test_identity_term_is_the_cosine_distance_to_the_own_row(problem):
    keys, queries, positives, own, targets = problem
    plain = SynonymMarginalLoss([keys], tau=0.1)(queries, targets)[0]
    with_identity = SynonymMarginalLoss([keys], tau=0.1, identity_weight=2.0)(queries, targets)[0]
    q = unit(queries)
    distances = [1 - max(float(q[i] @ keys[j]) for j in own[i]) for i in range(4) if own[i]]
    assert float(with_identity - plain) == pytest.approx(2.0 * sum(distances) / len(distances), rel=1e-4)


def test_marginal_loss_settings_are_checked():
    with pytest.raises(ObjectiveError, match="tau must be positive"):
        SynonymMarginalLoss([torch.eye(2)], tau=0)
    with pytest.raises(ObjectiveError, match="own_rows must be 'exclude' or 'positive'"):
        SynonymMarginalLoss([torch.eye(2)], own_rows="keep")


# -- key sets ----------------------------------------------------------------------------

def toy_keyset(folder, n_concepts=6, per_concept=3, model="toy", fingerprint="f" * 16):
    names = [f"name {c} {i}" for c in range(n_concepts) for i in range(per_concept)]
    cuis = [f"C{c}" for c in range(n_concepts) for _ in range(per_concept)]
    vectors = np.eye(len(names), 8, dtype=np.float32) + 0.1
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = [(n, c) for n, c in zip(names, cuis)] + [("lonely", "C0"), ("unknown concept", "C99")]
    return write_keyset(folder, names, cuis, vectors, queries, {"model": model, "fingerprint": fingerprint})


def test_a_keyset_reads_back_as_written_and_drops_queries_without_positives(tmp_path):
    written = toy_keyset(tmp_path / "keys")
    read = read_keyset(tmp_path / "keys")
    assert read.names == written.names and read.concepts == written.concepts
    assert np.array_equal(read.vectors, written.vectors) and read.row_concept.tolist() == written.row_concept.tolist()
    # "lonely" has three positives (C0's names); the unknown concept's query is not kept at all.
    assert ("lonely", 0) in read.queries and len(read.queries) == 19
    assert read.meta["n_queries_unknown_concept"] == 1 and read.meta["n_queries_without_positive"] == 0
    assert read.meta["n_names"] == 18
    positives, own = read.targets()
    first = read.queries.index(("name 0 1", 0))
    assert positives[first].tolist() == [0, 1, 2] and own[first].tolist() == [1]


def test_cross_references_name_the_ids_dictionaries_write():
    assert xref_concept("SNOMEDCT_US:60862001") == "60862001"
    assert xref_concept("SNOMEDCT_US_2023_10_01:60862001") == "60862001"
    assert xref_concept("MSH:D014012") == "D014012"
    assert xref_concept("MIM:123") == "OMIM:123"
    assert xref_concept("SNOMED_CT:60862001") == "60862001"
    assert xref_concept("UMLS_CUI:C0040264") == "C0040264"


def name_lookup(names, cuis):
    """KnowledgeBase.name_lookup() of a dictionary with these (name, concept) rows."""
    concepts = {}
    for name, cui in zip(names, cuis):
        concepts.setdefault(cui, []).append(name)
    return KnowledgeBase([Concept(cui, rows[0], aliases=rows[1:]) for cui, rows in concepts.items()]).name_lookup()


def test_ontology_names_become_queries_of_the_concept_they_cross_reference():
    # CADEC-like dictionary: SNOMED CT codes, one name each.
    names, cuis = ["tinnitus", "ringing in ear", "headache"], ["60862001", "162352007", "25064002"]
    hpo = KnowledgeBase([
        Concept("HP:0000360", "Tinnitus", aliases=["Ringing in the ears", "Ringing in ear"],
                xrefs=["SNOMEDCT_US:60862001", "MSH:D014012"]),
        Concept("HP:0002315", "Headache", aliases=["Head-ache", "Cephalgia"], xrefs=["SNOMED_CT:25064002"]),
        Concept("HP:9999999", "Unrelated", xrefs=["SNOMEDCT_US:1"]),
    ], name="hp")
    queries = ontology_queries(name_lookup(names, cuis), [hpo], TextNormaliser())
    # Normalised as mentions are; "ringing in ear" is another concept's name, so it is left out;
    # a concept's own name may stay (the loss finds it through its other names).
    assert queries == sorted([("tinnitus", "60862001"), ("ringing in the ears", "60862001"),
                              ("headache", "25064002"), ("head ache", "25064002"), ("cephalgia", "25064002")])
    # The same input gives the same queries.
    assert ontology_queries(name_lookup(names, cuis), [hpo], TextNormaliser()) == queries


def one_edit(a, b):
    """Whether `a` is `b` with one letter dropped, added, changed or swapped with the next."""
    if len(a) < len(b):
        a, b = b, a
    if len(a) == len(b) + 1:
        return any(a[:i] + a[i + 1:] == b for i in range(len(a)))
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return len(a) == len(b) and (len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                                     and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]))


def test_misspelt_copies_of_queries_are_one_edit_away_and_seeded():
    names, cuis = ["dizziness", "dizzyness", "diarrhoea", "ringing in ear"], ["1", "1", "2", "3"]
    queries = [("dizziness", "1"), ("the runs", "2"), ("ringing in the ears", "3"), ("gas", "4")]
    bearers = name_lookup(names, cuis)
    copies = typo_queries(queries, 3, bearers, seed=0)
    assert copies == typo_queries(queries, 3, bearers, seed=0) != typo_queries(queries, 3, bearers, seed=1)
    originals = dict((cui, text) for text, cui in queries)
    for text, cui in copies:
        original = originals[cui]
        # one edit in one word of four or more letters, whose first letter stays
        assert one_edit(text, original)
        changed = [(a, b) for a, b in zip(text.split(), original.split()) if a != b]
        assert len(changed) == 1 and len(changed[0][1]) >= 4 and changed[0][0][0] == changed[0][1][0]
    assert "4" not in {cui for _, cui in copies}  # "gas": no word long enough
    # a copy that spells a name of another concept is left out
    assert typo_queries([("dizzyness", "2")], 50, bearers) == [
        q for q in typo_queries([("dizzyness", "2")], 50, {}) if q[0] != "dizziness"]


def test_a_damaged_keyset_is_named(tmp_path):
    toy_keyset(tmp_path / "keys")
    (tmp_path / "keys" / "keys.npy").unlink()
    with pytest.raises(KeySetError, match=r"is not a key set: it lacks keys.npy"):
        read_keyset(tmp_path / "keys")


def test_query_batches_are_a_function_of_seed_and_index_and_keep_to_one_keyset(tmp_path):
    sets = [toy_keyset(tmp_path / "a"), toy_keyset(tmp_path / "b", n_concepts=3)]
    first, second = QueryBatches(sets, 4, seed=3), QueryBatches(sets, 4, seed=3)
    assert first.per_epoch == 19 // 4 + 10 // 4
    seen = {0: [], 1: []}
    for index in range(first.per_epoch):
        texts, targets = first[index]
        again, targets_again = second[index]
        assert texts == again and targets.keyset == targets_again.keyset
        queries = dict(sets[targets.keyset].queries)
        for text, positive in zip(texts, targets.positives):
            assert sets[targets.keyset].row_concept[positive.numpy()].tolist() == [queries[text]] * len(positive)
        seen[targets.keyset] += texts
    assert len(set(seen[0])) == len(seen[0]) == 16 and len(seen[1]) == 8
    halves = [QueryBatches(sets, 2, seed=3, rank=r, world_size=2)[5][0] for r in range(2)]
    assert sorted(halves[0] + halves[1]) == sorted(first[5][0])


# -- a run -------------------------------------------------------------------------------

def keys_config(tiny_model, **training):
    settings = dict(batch_size=8, max_steps=12, lr=5e-3, log_every=1, save_every=100, device="cpu", seed=0)
    settings.update(training)
    return TrainConfig.from_dict({
        "model": {"name_or_path": str(tiny_model), "pooling": "mean", "freeze": ["embeddings.word_embeddings"]},
        "objective": {"loss": "synonym_marginal", "marginal": {"tau": 0.1}},
        "training": settings,
    })


@pytest.fixture
def tiny_keys(tiny_kb, tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    return kb_keyset(tiny_kb, tmp_path / "keys", model=str(tiny_model))


def test_keys_embedded_again_record_the_model_as_named(tiny_kb, tiny_model, tmp_path, monkeypatch):
    """A key set embedded again (`spacy_sapbert_training.data.keys embed`, as on a GPU machine) reads as it was written:
    the same vectors, and its model named as given, not by this machine's path to it, so it
    trains beside key sets written with that name."""

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("spacy_sapbert.encoders.models.resolve_model", lambda name: str(tiny_model) if name == "toy" else name)
    written = kb_keyset(tiny_kb, tmp_path / "keys", model="toy")
    (tmp_path / "keys" / "keys.npy").unlink()
    embed_keyset(tmp_path / "keys", "toy", device="cpu")
    again = read_keyset(tmp_path / "keys")
    assert again.meta == written.meta
    assert np.allclose(again.vectors, written.vectors, atol=1e-5)


def test_a_run_against_frozen_keys_learns_and_answers_to_the_keys_model(tiny_model, tiny_keys, tiny_encoder, tmp_path):
    from safetensors.torch import load_file

    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.encoders.base import recorded_marginal_tau
    from spacy_sapbert.search.index import ConceptIndex

    run = tmp_path / "run"
    final = Trainer(keys_config(tiny_model), None, run, keys=[tmp_path / "keys"]).train()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["loss"] for r in rows[-4:]) < sum(r["loss"] for r in rows[:4])
    trained = TorchEncoder(final)
    assert trained.fingerprint == tiny_encoder.fingerprint == tiny_keys.fingerprint
    assert not np.allclose(trained.encode(["diabetes"]), tiny_encoder.encode(["diabetes"]))
    before = load_file(str(tiny_model / "model.safetensors"))
    after = {k: v for shard in final.glob("*.safetensors") for k, v in load_file(str(shard)).items()}
    assert torch.equal(before["embeddings.word_embeddings.weight"], after["embeddings.word_embeddings.weight"])
    # The index the keys' model built serves the trained model as it is.
    index = ConceptIndex.build(read_tiny_kb(tiny_keys), tiny_encoder)
    index.check_encoder(trained)
    record = read_settings(final)["training"]
    assert record["teacher"]["teacher"] == str(tiny_model) and record["n_queries"] == len(tiny_keys.queries)
    # The pipe ranks its concepts by the synonym-marginal score it was trained at.
    assert recorded_marginal_tau(final) == 0.1


def read_tiny_kb(keys):
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase

    kb = KnowledgeBase(name="tiny")
    for name, concept in zip(keys.names, keys.row_concept):
        kb.add(Concept(keys.concepts[concept], name))
    return kb


def test_keys_of_another_vector_space_or_no_keys_are_refused(tiny_model, tmp_path):
    toy_keyset(tmp_path / "keys", fingerprint="0" * 16)
    with pytest.raises(TrainingConfigError, match="the query encoder must start in the keys' vector space"):
        Trainer(keys_config(tiny_model), None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    with pytest.raises(TrainingConfigError, match="give key sets with --keys"):
        Trainer(keys_config(tiny_model), None, tmp_path / "run")


def test_a_student_keeps_the_layers_it_names(tiny_model, tiny_keys, tmp_path):
    config = keys_config(tiny_model, max_steps=2)
    config.model.layers = [1]
    final = Trainer(config, None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    assert json.loads((final / "config.json").read_text())["num_hidden_layers"] == 1
    config.model.layers = [2]
    with pytest.raises(TrainingConfigError, match=r"\[model\] layers \[2\] do not exist"):
        Trainer(config, None, tmp_path / "other", keys=[tmp_path / "keys"]).train()


def test_package_stores_only_what_training_changed_and_loads_whole(tiny_model, tiny_keys, tmp_path, monkeypatch):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.encoders.base import EncoderError, recorded_marginal_tau
    from spacy_sapbert_training.trainer.package import package_model

    final = Trainer(keys_config(tiny_model, max_steps=3), None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    packaged = package_model(final, tmp_path / "package", base=str(tiny_model))
    record = read_settings(packaged)["base"]
    assert record["from_base"] == ["embeddings.word_embeddings.weight", "pooler.dense.bias", "pooler.dense.weight"]
    full = TorchEncoder(final)
    small = TorchEncoder(packaged)
    assert small.fingerprint == full.fingerprint  # both answer to the keys' model
    assert np.allclose(small.encode(["lactic acidosis"]), full.encode(["lactic acidosis"]), atol=2e-3)
    # The synonym-marginal tau travels with it, and its card says how it ranks.
    assert recorded_marginal_tau(packaged) == 0.1
    card = (packaged / "MODEL_CARD.md").read_text()
    assert "synonym-marginal score at the training τ = 0.1" in card
    # The card says what the files leave out and how the folder loads whole.
    assert "leave out the tensors" in card and "`embeddings.word_embeddings.weight`" in card
    # A base whose frozen tensors differ is refused, naming the base.
    record["sha256"] = "0" * 64
    write_settings(packaged, base=record)
    with pytest.raises(EncoderError, match="weights differ from the ones it was trained with"):
        TorchEncoder(packaged)


def test_a_trained_query_encoder_exports_to_int8_and_indexes_with_the_keys_model(tiny_model, tiny_keys, tiny_encoder, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.encoders.loading import exact_encoder, load_encoder

    final = Trainer(keys_config(tiny_model, max_steps=2), None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    fast = load_encoder(final, "int8")
    assert fast.fingerprint == tiny_encoder.fingerprint
    assert exact_encoder(fast).name_or_path == tiny_encoder.name_or_path
    # A student started from the trained model's layers answers to, and indexes with, the keys' model too.
    config = keys_config(final, max_steps=2)
    config.model.layers = [0]
    student = Trainer(config, None, tmp_path / "student", keys=[tmp_path / "keys"]).train()
    assert exact_encoder(TorchEncoder(student)).name_or_path == tiny_encoder.name_or_path


def test_key_sources_name_how_often_an_epoch_visits_them(tmp_path):
    from spacy_sapbert_training.trainer.loop import key_source

    assert key_source("corpus/keys/cadec*3") == (Path("corpus/keys/cadec"), 3)
    assert key_source("corpus/keys/odd*name") == (Path("corpus/keys/odd*name"), 1)
    sets = [toy_keyset(tmp_path / "a"), toy_keyset(tmp_path / "b", n_concepts=3)]
    once, thrice = QueryBatches(sets, 4, seed=0), QueryBatches(sets, 4, seed=0, repeats=[1, 3])
    assert thrice.per_epoch == once.per_epoch + 2 * (10 // 4)
    which = [thrice[i][1].keyset for i in range(thrice.per_epoch)]
    assert which.count(1) == 3 * (10 // 4)


def test_refreshed_keys_make_a_model_of_its_own_space(tiny_model, tiny_keys, tiny_encoder, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    config = keys_config(tiny_model, max_steps=4)
    config.objective.marginal.refresh_keys_every = 2
    final = Trainer(config, None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    assert "teacher" not in read_settings(final)
    assert TorchEncoder(final).fingerprint != tiny_encoder.fingerprint


def test_the_hybrid_learns_its_sparse_weight_and_the_model_records_it(tiny_model, tiny_keys, tmp_path):
    from spacy_sapbert.encoders.base import recorded_sparse_weight

    config = keys_config(tiny_model, max_steps=6)
    config.objective.sparse.weight = 0.3
    config.objective.sparse.lr = 0.05
    final = Trainer(config, None, tmp_path / "run", keys=[tmp_path / "keys"]).train()
    learned = recorded_sparse_weight(final)
    assert learned > 0 and learned != pytest.approx(0.3, abs=1e-3)
    config.objective.sparse.learn = False
    fixed = Trainer(config, None, tmp_path / "fixed", keys=[tmp_path / "keys"]).train()
    assert recorded_sparse_weight(fixed) == pytest.approx(0.3)


def test_the_finetune_command_trains_on_key_sets_with_repeats(tiny_model, tiny_keys, tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "spacy_sapbert_training.trainer.finetune", "--config", str(repo / "configs" / "finetune-cpu.cfg"),
         "--keys", f"{tmp_path / 'keys'}*2", "--output", str(tmp_path / "run"), "--model", str(tiny_model),
         "--training.max_steps", "2", "--training.batch_size", "4", "--training.device", "cpu",
         "--objective.sparse.weight", "0"],
        capture_output=True, text=True, cwd=repo, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    record = read_settings(tmp_path / "run" / "model")["training"]
    assert record["keys"] == [f"{tmp_path / 'keys'}*2"] and record["steps"] == 2
    missing = subprocess.run(
        [sys.executable, "-m", "spacy_sapbert_training.trainer.finetune", "--config", str(repo / "configs" / "finetune-cpu.cfg"),
         "--output", str(tmp_path / "other"), "--model", str(tiny_model)],
        capture_output=True, text=True, cwd=repo, timeout=300)
    assert missing.returncode == 1 and "give key sets with --keys" in missing.stderr


def test_an_unknown_ontology_for_queries_is_named_in_one_sentence(tmp_path):
    from typer.testing import CliRunner

    from spacy_sapbert_training.data.keys import app

    result = CliRunner().invoke(app, ["task", "--dataset", "cadec", "--output", str(tmp_path / "k"),
                                      "--ontologies", "hp,snomed"])
    assert result.exit_code != 0 and "Unknown ontology 'snomed' in --ontologies" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "k").exists()


MENTIONS_PUBTATOR = """{doc}|t|Duchenne muscular dystrophy (DMD) and breast and ovarian cancer.
{doc}|a|DMD boys were studied.
{doc}\t0\t27\tDuchenne muscular dystrophy\tSpecificDisease\tD020388
{doc}\t29\t32\tDMD\tSpecificDisease\tD020388
{doc}\t38\t63\tbreast and ovarian cancer\tCompositeMention\tD001943|D010051
{doc}\t65\t68\tDMD\tSpecificDisease\tD020388
"""


def test_train_mentions_become_queries_against_the_ontologys_own_keys(tmp_path, monkeypatch):
    from spacy_sapbert_training.data import datasets as ds
    from spacy_sapbert_training.data.keys import mention_keyset

    names = ["dmd", "muscular dystrophy duchenne", "breast cancer", "mammary carcinoma"]
    cuis = ["MONDO:1", "MONDO:1", "D001943", "D001943"]
    vectors = np.eye(4, 8, dtype=np.float32)
    write_keyset(tmp_path / "base", names, cuis, vectors, [], {"model": "toy", "fingerprint": "f" * 16,
                                                                  "source": "toy kb"})
    kb = KnowledgeBase([Concept("MONDO:1", "muscular dystrophy duchenne", ["dmd"], alt_ids=["D020388"]),
                        Concept("D001943", "breast cancer", ["mammary carcinoma"])])
    path = tmp_path / "train.txt"
    path.write_text("\n".join(MENTIONS_PUBTATOR.format(doc=doc) for doc in (101, 102, 103, 104, 105)))
    monkeypatch.setattr(ds, "load_pubtator_split", lambda dataset, split, data_dir: ds.read_pubtator(path))
    keys = mention_keyset(tmp_path / "base", tmp_path / "out", kb, ["bc5cdr-disease"], tmp_path)
    # The keys are the base's, untouched; the MeSH gold finds the MONDO concept holding it; the
    # short form reads as its long form; the composite is left out.
    assert keys.names == names and np.array_equal(keys.vectors, vectors)
    assert keys.queries == [("duchenne muscular dystrophy", keys.concepts.index("MONDO:1"))]
    assert keys.meta["counts"]["bc5cdr-disease"] == {"mentions": 20, "queries": 15}
    assert read_keyset(tmp_path / "out").queries == keys.queries
    held = mention_keyset(tmp_path / "base", tmp_path / "held", kb, ["bc5cdr-disease"], tmp_path, held_out_fold=0)
    assert held.meta["counts"]["bc5cdr-disease"]["mentions"] == 16 and held.meta["held_out_fold"] == 0
