"""Exact names first: a concept bearing the mention's own name ranks before the others, in the
model's order, at score 1.0, the others kept as alternatives, even where the search did not
reach that name's row; and exact_match finds names through the same row keys."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_sapbert.candidates import CandidateGenerator, CandidateSettings, Scoring
from spacy_sapbert.search.index import ConceptIndex
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase, name_hash
from spacy_sapbert.ranking.concepts import best_concepts


def test_the_concept_of_an_exact_name_ranks_first_at_score_one():
    # concept 0: the query's own name at 0.90; concept 1: three close names; concept 2: one name
    scores = np.array([0.91, 0.90, 0.88, 0.87, 0.60], dtype=np.float32)
    rows = np.array([1, 0, 2, 3, 4])
    row_concepts = np.array([0, 1, 1, 1, 2])
    exact = rows == 0
    # the marginal puts concept 1 first; the exact name puts concept 0 back, scored as an identical string
    assert [c for c, _ in best_concepts(scores, rows, row_concepts, k=3, tau=0.05)] == [1, 0, 2]
    ranked = best_concepts(scores, rows, row_concepts, k=3, tau=0.05, exact=exact)
    # the others show the synonym-marginal score they are ranked by
    marginal = 0.91 + 0.05 * np.log(1 + np.exp((0.88 - 0.91) / 0.05) + np.exp((0.87 - 0.91) / 0.05))
    assert ranked == [(0, 1.0), (1, pytest.approx(marginal)), (2, pytest.approx(0.60))]
    assert best_concepts(scores, rows, row_concepts, k=3, exact=exact)[0] == (0, 1.0)
    # past the k-th concept it still moves up, and k holds
    assert best_concepts(scores, rows, row_concepts, k=1, exact=rows == 4) == [(2, 1.0)]


def test_a_concept_named_where_the_search_did_not_reach_joins_after_those_it_reached():
    scores = np.array([0.91, 0.90, 0.60], dtype=np.float32)
    rows = np.array([1, 0, 2])
    row_concepts = np.array([0, 1, 2, 3])
    ranked = best_concepts(scores, rows, row_concepts, k=3, exact=rows == 2, named_elsewhere=[3, 2])
    assert ranked == [(2, 1.0), (3, 1.0), (1, pytest.approx(0.91))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=12), st.lists(st.integers(0, 3), min_size=12, max_size=12),
       st.sampled_from([0.0, 0.05]))
def test_without_an_exact_hit_the_order_is_the_models(levels, concepts, tau):
    scores = np.array(levels, dtype=np.float32) / 20
    rows = np.arange(len(levels))
    row_concepts = np.array(concepts[: len(levels)])
    plain = best_concepts(scores, rows, row_concepts, 3, tau)
    assert best_concepts(scores, rows, row_concepts, 3, tau, exact=np.zeros(len(rows), dtype=bool)) == plain
    # an exact hit moves its concept to the front and leaves the others in their order
    exact = rows == len(rows) - 1
    first = int(row_concepts[-1])
    moved = best_concepts(scores, rows, row_concepts, 3, tau, exact=exact)
    everyone = best_concepts(scores, rows, row_concepts, len(rows), tau)
    assert moved == ([(first, 1.0)] + [c for c in everyone if c[0] != first])[:3]


@pytest.fixture
def twin_index():
    """An index whose vectors prefer concept B for the text "gut ache", a name of concept A
    (the mention's encoder drifted towards B's cluster of names)."""
    kb = KnowledgeBase([Concept("A", "gut ache", aliases=["stomach colic"]),
                        Concept("B", "abdominal pain", aliases=["belly pain", "tummy pain"])])
    names, _ = kb.name_rows()
    assert names == ["gut ache", "stomach colic", "abdominal pain", "belly pain", "tummy pain"]
    vectors = np.array([[0.8, 0.6], [0.0, 1.0], [0.9, 0.436], [0.9, 0.436], [0.9, 0.436]], dtype=np.float32)
    return ConceptIndex.from_vectors(kb, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), "test")


class FixedEncoder:
    """Every text encodes as (1, 0)."""

    def encode(self, texts):
        return np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))


def test_the_pipe_settings_put_the_exact_name_first_with_alternatives(twin_index):
    def linked(**settings):
        generator = CandidateGenerator(FixedEncoder(), twin_index, CandidateSettings(threshold=0.0),
                                       Scoring(**settings), content_rule=False,
                                       recorded=Scoring(sparse_weight=0.0, marginal_tau=0.05))
        return generator.generate([("Gut  Ache", ()), ("belly ache", ()), ("Gut-ache!", ())])

    exact_first, by_model = linked(), linked(exact_first=False)
    assert [c for c, _ in by_model[0]] == ["B", "A"]
    assert [c for c, _ in exact_first[0]] == ["A", "B"]  # any case and spacing; B stays an alternative
    assert exact_first[1] == by_model[1]  # no exact name: the model's order
    assert exact_first[2] == exact_first[0]  # nor punctuation ("Hoe-140" is "HOE 140", as the standard protocol reads them)
    assert twin_index.row_keys()[0] == name_hash("GUT ACHE")


def test_exact_match_reads_the_same_row_keys(twin_index):
    generator = CandidateGenerator(FixedEncoder(), twin_index, CandidateSettings(threshold=0.0),
                                   Scoring(exact_match=True))
    assert generator.generate([("Stomach  colic", ()), ("tummy ache", ())])[0] == [("A", 1.0)]


def test_row_keys_are_cached_per_index_and_made_again_when_damaged(tiny_index_dir, tiny_encoder, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path))
    index = ConceptIndex.load(tiny_index_dir, encoder=tiny_encoder)
    made = index.row_keys()
    assert list(made) == [name_hash(name) for name in index.row_names()]
    (state,) = tmp_path.glob("row-keys-*")
    again = ConceptIndex.load(tiny_index_dir, encoder=tiny_encoder)
    again.row_names = None  # cached keys need no names
    assert np.array_equal(again.row_keys(), made)
    (state / "keys.npy").write_bytes(b"damaged")
    healed = ConceptIndex.load(tiny_index_dir, encoder=tiny_encoder)
    assert np.array_equal(healed.row_keys(), made)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["gut ache", "Gut Ache", "colic", "pain", "belly pain"]), min_size=1,
                         max_size=4), min_size=1, max_size=6))
def test_rows_named_finds_what_a_scan_of_every_row_finds_in_row_order(names_per_concept):
    kb = KnowledgeBase([Concept(f"C{i}", names[0], aliases=names[1:]) for i, names in enumerate(names_per_concept)])
    names, _ = kb.name_rows()
    index = ConceptIndex.from_vectors(kb, np.ones((len(names), 2), dtype=np.float32) / np.sqrt(2), "test")
    for text in ["gut ache", "pain", "colic", "absent"]:
        key = name_hash(text)
        assert list(index.rows_named(key)) == list(np.flatnonzero(index.row_keys() == np.uint64(key)))
    keys = [name_hash(text) for text in ["gut ache", "pain", "colic", "absent", "belly pain"]]
    assert index.named_among(np.array(keys, dtype=np.uint64)).tolist() == [len(index.rows_named(k)) > 0 for k in keys]
