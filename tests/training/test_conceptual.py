"""MCSM and the synonym-pair F1 against brute-force recomputations."""
import math

import numpy as np
import pytest

from spacy_sapbert_training.evaluation import conceptual


def test_mcsm_maximum_is_the_papers_11_09():
    assert conceptual.mcsm_max() == pytest.approx(11.09, abs=0.005)


def test_mcsm_matches_a_brute_force_recomputation():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    groups = {"a": rng.random(60) < 0.5, "b": rng.random(60) < 0.3}
    k = 10
    got = conceptual.mcsm(vectors, groups, k=k)
    similarity = vectors @ vectors.T
    for name, member in groups.items():
        per_concept = []
        for i in np.flatnonzero(member):
            order = [j for j in np.argsort(-similarity[i], kind="stable") if j != i][:k]
            per_concept.append(sum(member[j] / math.log2(rank + 1) for rank, j in enumerate(order, start=1)))
        assert got[name] == pytest.approx(np.mean(per_concept), rel=1e-5)


def test_the_threshold_and_f1_match_a_brute_force_search():
    rng = np.random.default_rng(1)
    same = rng.random(200) < 0.4
    similarity = np.where(same, rng.normal(0.7, 0.15, 200), rng.normal(0.45, 0.15, 200))
    threshold, f1 = conceptual.best_threshold(similarity, same)
    brute = max(conceptual.pair_f1(similarity, same, t) for t in similarity)
    assert f1 == pytest.approx(brute) and conceptual.pair_f1(similarity, same, threshold) == pytest.approx(f1)


def test_synonym_pairs_split_concepts_into_two_fixed_halves(tiny_kb):
    halves = conceptual.synonym_pairs(tiny_kb)
    assert halves == conceptual.synonym_pairs(tiny_kb)
    owner = {n: c.concept_id for c in tiny_kb for n in c.names}
    for half, pairs in halves.items():
        assert {conceptual._half(owner[a]) for a, _, _ in pairs} <= {half}
        assert all((owner[a] == owner[b]) == same for a, b, same in pairs)
    assert halves[0] and halves[1] and any(same for _, _, same in halves[1])


def test_evaluate_prints_mcsm_and_pair_f1(tiny_model, tiny_kb, monkeypatch):
    from spacy_sapbert_training.evaluation import evaluate

    monkeypatch.setattr("spacy_sapbert.kb.bundled.default_kb", lambda: (tiny_kb, {}))
    scores = evaluate.run("mcsm", "dev", "model", "standard", None, str(tiny_model))
    assert scores["max"] == pytest.approx(11.09, abs=0.005) and 0 <= scores["mcsm_C"] <= scores["max"]
    pairs = evaluate.run("synonym-pairs", "dev", "model", "standard", None, str(tiny_model))
    assert 0 <= pairs["pair_f1"] <= 1 and -1 <= pairs["threshold"] <= 1
