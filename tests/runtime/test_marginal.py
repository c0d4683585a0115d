"""Concepts ranked by BioSyn's synonym-marginal score, the tau a model records, and the pipe and
harness taking it."""
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_sapbert.encoders.base import recorded_marginal_tau
from spacy_sapbert.encoders.settings import write_settings
from spacy_sapbert.ranking.concepts import best_concepts, marginal_block, tie_order

FLOAT_MIN = np.finfo(np.float32).min


def test_a_concept_many_close_names_point_to_outranks_one_lone_name():
    # concept 0: one name at 0.90; concept 1: three names at 0.88, 0.87, 0.86; a FAISS pad last
    scores = np.array([0.90, 0.88, 0.87, 0.86, FLOAT_MIN], dtype=np.float32)
    rows = np.array([0, 1, 2, 3, -1])
    row_concepts = np.array([0, 1, 1, 1])
    assert best_concepts(scores, rows, row_concepts, k=5) == [(0, pytest.approx(0.90)), (1, pytest.approx(0.88))]
    # 0.88 + 0.05 log(1 + e^-0.2 + e^-0.4) = 0.926 > 0.90; each shows the score it ranks by
    ranked = best_concepts(scores, rows, row_concepts, k=5, tau=0.05)
    marginal = 0.88 + 0.05 * np.log(1 + np.exp(-0.2) + np.exp(-0.4))
    assert ranked == [(1, pytest.approx(marginal, abs=1e-6)), (0, pytest.approx(0.90))]
    assert best_concepts(scores, rows, row_concepts, k=1, tau=0.05) == ranked[:1]
    # a colder softmax is the best name again
    assert [c for c, _ in best_concepts(scores, rows, row_concepts, k=5, tau=0.005)] == [0, 1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=12), st.floats(0.01, 1.0))
def test_one_name_a_concept_ranks_as_its_best_name_ties_included(levels, tau):
    """With one name each the marginal is the name's score: the order is the best-name order,
    ties (one name under two ids) in tie_order."""
    scores = np.array(levels, dtype=np.float32) / 20
    rows = np.arange(len(levels))[::-1].copy()
    row_concepts = np.arange(len(levels))
    assert best_concepts(scores, rows, row_concepts, 5, tau) == best_concepts(scores, rows, row_concepts, 5)


def marginal_alone(scores, rows, row_concepts, tau):
    """One query's concepts by synonym-marginal score, from hits already in tie order, with the
    numpy calls of one query alone: the reference marginal_block is held to."""
    hit = rows >= 0
    scores, concepts = scores[hit], row_concepts[rows[hit]]
    if not len(concepts):
        return []
    unique, first = np.unique(concepts, return_index=True)
    which = np.searchsorted(unique, concepts)
    marginal = scores[0] + tau * np.log(np.bincount(which, weights=np.exp((scores - scores[0]) / tau)))
    ranked = np.lexsort((first, -np.round(marginal, 6)))
    best = scores[first]
    own = best + tau * np.log(np.bincount(which, weights=np.exp((scores - best[which]) / tau)))
    return [(int(unique[i]), min(1.0, float(own[i]))) for i in ranked]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(1, 12), st.sampled_from([0.02, 0.05, 0.1]),
       st.integers(0, 2**31 - 1))
def test_a_blocks_concepts_rank_as_each_querys_own_do(n, width, n_concepts, tau, seed):
    """marginal_block gives each query of a block what ranking it alone gives (marginal_alone, the
    per-query ranking the pipe used before blocks), after tie_order: the same concepts, order and
    scores bit for bit (ties, pads and repeated concepts included)."""
    rng = np.random.default_rng(seed)
    row_concepts = rng.integers(0, n_concepts, size=50).astype(np.int32)
    rows = rng.integers(-1, 50, size=(n, width))
    scores = np.round(rng.random((n, width)), int(rng.integers(1, 4))).astype(np.float32)
    scores[rows < 0] = FLOAT_MIN
    block = marginal_block(scores, rows, row_concepts, tau)
    for query in range(n):
        order = tie_order(scores[query], rows[query])
        alone = marginal_alone(scores[query].astype(np.float64)[order], rows[query][order], row_concepts, tau)
        assert block[query] == alone
        assert [(type(c), type(s)) for c, s in block[query]] == [(type(c), type(s)) for c, s in alone]


@pytest.fixture
def marginal_model(tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    assert recorded_marginal_tau(model) == 0.0
    write_settings(model, marginal={"tau": 0.05})
    return model


def test_the_pipe_ranks_by_the_tau_the_model_records(marginal_model, tiny_index_dir):
    from conftest import demo_linker

    def linker(**config):
        return demo_linker(marginal_model, tiny_index_dir, **config)

    nlp, pipe = linker()
    assert pipe.generator.tau == 0.05
    _, by_best = linker(scoring={"marginal_tau": 0.0})
    assert by_best.generator.tau == 0.0
    text = "lactic acidosis after cisplatin"
    # Exact names stay first, with the exact name's score.
    assert [(e._.cui, round(e._.cui_score, 4)) for e in nlp(text).ents] == [("D000140", 1.0), ("D002945", 1.0)]
    with pytest.raises(ValueError, match=r"^marginal_tau \(-0.1\) must be a number of at least 0"):
        linker(scoring={"marginal_tau": -0.1})


def test_the_int8_export_carries_the_tau(marginal_model, tmp_path, monkeypatch):
    from spacy_sapbert.encoders.export import exported_model

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    assert recorded_marginal_tau(exported_model(marginal_model, "int8")) == 0.05


def test_the_harness_ranks_as_the_pipe_does(marginal_model, tiny_kb, tmp_path, monkeypatch):
    from spacy_sapbert_training.evaluation.systems import EncoderSystem

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    system = EncoderSystem(tiny_kb, str(marginal_model))
    assert system.generator.tau == 0.05
    assert EncoderSystem(tiny_kb, str(marginal_model), marginal_tau=0.0).generator.tau == 0.0
