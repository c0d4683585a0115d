"""BioSyn's hybrid score: dense cosine + w × char 3-gram tf-idf cosine, the same in the pipe and
the harness, and named rows under name precedence."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer

from spacy_sapbert.encoders.base import recorded_sparse_weight
from spacy_sapbert.encoders.settings import write_settings
from spacy_sapbert.search.index import ConceptIndex
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.ranking.hybrid import HybridRescorer, _counted, fit_char_tfidf
from spacy_sapbert.ranking.concepts import search_concepts


def test_rescored_hits_add_the_weighted_tfidf_cosine(tiny_kb):
    names, _ = tiny_kb.name_rows()
    rescorer = HybridRescorer(names, weight=0.7)
    rows = np.array([3, 0, -1, 7])
    cosines = np.array([0.9, 0.5, -3e38, 0.2], dtype=np.float32)
    block = rescorer.for_texts(["diabetes mellitus type 2", "lactic acidosis"])(
        np.array([1, 0]), np.stack([rows, rows]), np.stack([cosines, cosines]))
    scores = block[0]  # the block's first query is text 1
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), lowercase=True).fit(names)
    query = vectorizer.transform(["lactic acidosis"])
    expected = [(cosines[i] + 0.7 * float((vectorizer.transform([names[r]]) @ query.T).toarray()[0, 0])) / 1.7
                for i, r in enumerate(rows) if r >= 0]
    assert np.allclose(scores[[0, 1, 3]], expected, atol=1e-5)
    assert scores[2] == -np.inf  # no hit stays last


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="aAbé -(x)\t\n12", max_size=12), min_size=1, max_size=4))
def test_mentions_get_scikit_learns_tfidf_vectors_without_scikit_learn(texts):
    names = ["Lactic Acidosis", "acidosis, lactic", "x", "ab", "Ébola (AB-12)", "diabetes type 2", "a b"]
    fitted = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), lowercase=True, dtype=np.float32).fit(names)
    ours = HybridRescorer(names, weight=1.0).transform(texts)
    assert np.allclose(ours.toarray(), fitted.transform(texts).toarray(), atol=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="aAbé -(x)\t\n12ZzİΣ𝔸", min_size=1, max_size=40).filter(lambda text: text.split()),
                min_size=1, max_size=30))
def test_names_are_fitted_as_scikit_learn_fits_them_without_scikit_learn(names):
    """fit_char_tfidf gives scikit-learn's vocabulary, idf and name vectors bit for bit, their
    stored order included (the hybrid score's sums follow it); the bundled index's 229,810 names
    were compared the same way."""
    fitted = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), lowercase=True, dtype=np.float32)
    expected = fitted.fit_transform(names).tocsr()
    vocabulary, idf, vectors = fit_char_tfidf(names)
    assert vocabulary == {gram: int(column) for gram, column in fitted.vocabulary_.items()}
    assert np.array_equal(idf, fitted.idf_) and idf.dtype == fitted.idf_.dtype
    for ours, theirs in ((vectors.indptr, expected.indptr), (vectors.indices, expected.indices),
                         (vectors.data, expected.data)):
        assert np.array_equal(ours, theirs) and ours.dtype == theirs.dtype


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**40), max_size=60))
def test_counted_keys_are_numpys_unique_with_counts(keys):
    keys = np.asarray(keys, dtype=np.int64)
    ours, theirs = _counted(keys), np.unique(keys, return_counts=True)
    for a, b in zip(ours, theirs):
        assert np.array_equal(a, b) and a.dtype == b.dtype


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="aAbé -(x)\t\n12ZzİΣ𝔸", max_size=20), min_size=8, max_size=50))
def test_many_texts_get_the_vectors_the_loop_gives_them(texts):
    """From TRANSFORM_IN_NUMPY texts transform finds n-grams in numpy: the same vectors bit for
    bit, stored order included, as the loop over char_wb_ngrams gives."""
    rescorer = HybridRescorer(["Lactic Acidosis", "x", "ab", "Ébola (AB-12)", "İzmir ΑΣ 𝔸b", "zz 12 z"], weight=1.0)
    many = rescorer.transform(texts)
    rescorer.TRANSFORM_IN_NUMPY = len(texts) + 1
    loop = rescorer.transform(texts)
    for ours, theirs in ((many.data, loop.data), (many.indices, loop.indices), (many.indptr, loop.indptr)):
        assert ours.tobytes() == theirs.tobytes() and ours.dtype == theirs.dtype


def scipy_transform(rescorer, texts):
    """HybridRescorer.transform as scipy's products computed it until 0.2.0: the reference."""
    import scipy.sparse

    from spacy_sapbert.ranking.hybrid import char_wb_ngrams

    rows, columns = [], []
    for row, text in enumerate(texts):
        found = [rescorer.vocabulary[g] for g in char_wb_ngrams(text) if g in rescorer.vocabulary]
        rows += [row] * len(found)
        columns += found
    counts = scipy.sparse.csr_matrix((np.ones(len(columns), dtype=np.float32), (rows, columns)),
                                     shape=(len(texts), len(rescorer.vocabulary)))
    weighted = counts.multiply(rescorer.idf[None, :]).tocsr()
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1))).ravel()
    return scipy.sparse.diags(1 / np.where(norms > 0, norms, 1)).dot(weighted).tocsr().astype(np.float32)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="aAbé -(x)\t\n12Zz", max_size=60), min_size=1, max_size=12))
def test_mention_vectors_are_scipys_bit_for_bit_stored_order_included(texts):
    """The stored order matters: rescore's sums follow it (the 2,926 distinct NCBI and BC5CDR dev
    mentions against the bundled index's names were compared the same way, and their rescores)."""
    names = ["Lactic Acidosis", "acidosis, lactic", "x", "ab", "Ébola (AB-12)", "diabetes type 2", "a b",
             "aaaa bbbb aaab", "zz12 12zz"]
    rescorer = HybridRescorer(names, weight=1.0)
    ours, theirs = rescorer.transform(texts), scipy_transform(rescorer, texts)
    for a, b in ((ours.indptr, theirs.indptr), (ours.indices, theirs.indices), (ours.data, theirs.data)):
        assert np.array_equal(a, b) and a.dtype == b.dtype


def test_a_typo_finds_its_concept_through_the_sparse_term(tiny_index_dir, tiny_encoder):
    index = ConceptIndex.load(tiny_index_dir, encoder=tiny_encoder)
    query = "lactik acidossis"
    vectors = tiny_encoder.encode([query])
    hybrid = HybridRescorer(index.row_names(), weight=5.0)
    found = search_concepts(index, vectors, k=3, rescore=hybrid.for_texts([query]), min_rows=64)[0]
    assert found[0][0] == "D000140"
    assert found[0][1] != pytest.approx(float(vectors[0] @ tiny_encoder.encode(["lactic acidosis"])[0]))


def test_the_fitted_state_is_cached_per_index_and_refitted_when_unreadable(tiny_index_dir, tiny_encoder, tmp_path):
    index = ConceptIndex.load(tiny_index_dir, encoder=tiny_encoder)
    rows, cosines = np.arange(len(index))[None], np.zeros((1, len(index)), dtype=np.float32)
    first_text = np.array([0])
    texts = ["lactik acidossis", "diabetes"]
    fitted = HybridRescorer(index.row_names(), weight=0.5).for_texts(texts)(first_text, rows, cosines)
    first = HybridRescorer.for_index(index, 0.5, cache=tmp_path)
    (state,) = tmp_path.glob("hybrid-*")
    index.row_names = None  # a cached state needs no names
    cached = HybridRescorer.for_index(index, 0.5, cache=tmp_path)
    for rescorer in (first, cached):
        assert np.array_equal(rescorer.for_texts(texts)(first_text, rows, cosines), fitted)
    (state / "counts.npy").write_bytes(b"not an array")
    del index.row_names
    healed = HybridRescorer.for_index(index, 0.5, cache=tmp_path)
    assert np.array_equal(healed.for_texts(texts)(first_text, rows, cosines), fitted)
    assert HybridRescorer(None, 0.5, state=state).name_vectors.shape == healed.name_vectors.shape


def test_row_names_follow_name_precedence(tiny_encoder):
    kb = KnowledgeBase([
        Concept("D004893", "Erythema Nodosum", ["nodular erythema"], types=["C17.800"]),
        Concept("MONDO:0850231", "erythema nodosum", ["EN skin disease"], types=["MONDO"]),
    ], name="shared")
    index = ConceptIndex.build(kb, tiny_encoder)
    index.meta["label_types"] = {"Disease": ["C", "MONDO"]}
    converted = index.converted("sq8", prefer=["D[0-9]+"])
    assert converted.row_names() == ["Erythema Nodosum", "nodular erythema", "EN skin disease"]
    assert index.row_names() == ["Erythema Nodosum", "nodular erythema", "erythema nodosum", "EN skin disease"]


def test_the_pipe_takes_the_weight_the_model_records(tiny_model, tiny_index_dir, tmp_path):
    import shutil

    from conftest import demo_linker

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    assert recorded_sparse_weight(model) == 0.0
    write_settings(model, sparse={"sparse_weight": 0.4})
    assert recorded_sparse_weight(model) == 0.4

    def linker(**config):
        return demo_linker(model, tiny_index_dir, **config)

    nlp, pipe = linker()
    assert pipe.hybrid is not None and pipe.hybrid.weight == pytest.approx(0.4)
    text = "lactic acidosis after cisplatin"
    hybrid = [(ent._.cui, ent._.cui_score) for ent in nlp(text).ents]
    dense_nlp, dense = linker(scoring={"sparse_weight": 0.0})
    assert dense.hybrid is None
    plain = [(ent._.cui, ent._.cui_score) for ent in dense_nlp(text).ents]
    # Exact names score 1 either way (the hybrid is divided by 1 + w); the scores of the rest move.
    assert [c for c, _ in hybrid] == [c for c, _ in plain] == ["D000140", "D002945"]
    assert all(s == pytest.approx(1.0, abs=1e-5) for _, s in hybrid)
    others = [ent._.kb_ents[1][1] for ent in nlp(text).ents], [ent._.kb_ents[1][1] for ent in dense_nlp(text).ents]
    assert others[0] != pytest.approx(others[1])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet="aAbé -(x)12Zz", min_size=1, max_size=40).filter(lambda text: text.split()), min_size=1,
                max_size=20), st.lists(st.integers(min_value=0, max_value=19), max_size=30))
def test_rows_made_from_the_counts_are_the_fitted_vectors_bit_for_bit(names, rows):
    """The state keeps n-gram counts and row norms; the rows a search hits are made from them,
    bit for bit, stored order included, as fit_char_tfidf's vectors (the rescore's sums follow it)."""
    from spacy_sapbert.ranking.hybrid import fit_char_counts

    rows = np.array([r % len(names) for r in rows], dtype=np.int64)
    _, _, vectors = fit_char_tfidf(names)
    _, _, counts = fit_char_counts(names)
    made, expected = counts.vectors(rows), vectors[rows]
    for a, b in ((made.indptr, expected.indptr), (made.indices, expected.indices), (made.data, expected.data)):
        assert np.array_equal(a, b) and a.dtype == b.dtype


def _random_rows(draw, rows: int, width: int, ascending: bool):
    from spacy_sapbert.ranking.hybrid import SparseRows

    data, columns, pointers = [], [], [0]
    for _ in range(rows):
        chosen = draw(st.lists(st.integers(0, width - 1), unique=True, max_size=width))
        columns += sorted(chosen) if ascending else chosen
        data += draw(st.lists(st.floats(2.0 ** -10, 1.0, width=32), min_size=len(chosen), max_size=len(chosen)))
        pointers.append(len(columns))
    return SparseRows(np.array(data, dtype=np.float32), np.array(columns, dtype=np.int32),
                      np.array(pointers, dtype=np.int32), width)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 6), st.integers(1, 40), st.booleans(), st.booleans(), st.sampled_from([1 << 21, 5]))
def test_paired_products_are_scipys_bit_for_bit(data, rows, width, names_ascending, mentions_ascending, cells):
    """The hybrid score's sums, made without scipy, are what scipy's names.multiply(mentions)
    .sum(axis=1) gave, bit for bit: its order of summing depends on whether both store their
    columns ascending, and float sums on their order (the dev mentions' kb_ents were compared too)."""
    import scipy.sparse

    from spacy_sapbert.ranking.hybrid import _Paired, _products

    names = _random_rows(data.draw, rows, width, names_ascending)
    mentions = _random_rows(data.draw, rows, width, mentions_ascending)
    theirs = [scipy.sparse.csr_matrix((r.data, r.indices, r.indptr), shape=r.shape) for r in (names, mentions)]
    expected = np.asarray(theirs[0].multiply(theirs[1]).sum(axis=1), dtype=np.float32).ravel()
    _Paired.TABLE_CELLS, default = cells, _Paired.TABLE_CELLS  # 5: the mentions' table made in turns
    try:
        ours = _products(names, mentions)
    finally:
        _Paired.TABLE_CELLS = default
    assert ours.dtype == np.float32 and np.array_equal(ours.view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(names[np.arange(rows)[::-1]].toarray(), theirs[0][np.arange(rows)[::-1]].toarray())


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet="abc é", min_size=1, max_size=40).filter(lambda text: text.split()), min_size=2,
                max_size=12), st.lists(st.text(alphabet="abc é", min_size=1, max_size=40), min_size=1, max_size=6),
       st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_a_batchs_hits_rescored_in_parts_score_what_they_score_at_once(names, texts, part, seed):
    """A large batch's hits are rescored in parts (PART_ROWS), each row's score bit for bit what
    one call over every hit gives, rows past the fitted names (a supplement's) included."""
    fitted = max(1, len(names) - 2)
    rescorer = HybridRescorer(names[:fitted], weight=0.5)
    rescorer.more_names = lambda rows: [names[r] for r in rows]
    random = np.random.default_rng(seed)
    rows = random.integers(-1, len(names), size=(len(texts), 5))
    cosines = random.random((len(texts), 5), dtype=np.float32)
    positions = np.arange(len(texts))[::-1].copy()
    at_once = rescorer.for_texts(texts)(positions, rows, cosines)
    rescorer.PART_ROWS = part
    in_parts = rescorer.for_texts(texts)(positions, rows, cosines)
    assert np.array_equal(at_once.view(np.uint32), in_parts.view(np.uint32))
