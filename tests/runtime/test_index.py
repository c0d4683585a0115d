import filecmp

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_sapbert.encoders.transformer import TorchEncoder
from spacy_sapbert.ranking.concepts import search_concepts
from spacy_sapbert.search.index import (
    FAISS_FILE,
    GRAPH_FILE,
    KB_FILE,
    KB_FILE_GZ,
    META_FILE,
    ROWS_FILE,
    ConceptIndex,
    ConceptIndexError,
)
from spacy_sapbert.search.builders import _graph_over_codes

QUERIES = ["diabetes type two", "lactate acidosis", "platinum drug", "kidney failure", "tumor", "aspirin"]


def brute_force(index, vectors, k, allowed=None):
    """Top-k distinct concepts by exhaustive numpy search: a concept scores as its best name."""
    names, cuis = index.kb.name_rows()
    name_vectors = index.index.reconstruct_n(0, index.index.ntotal)
    scores = vectors @ name_vectors.T
    results = []
    for row in scores:
        best = {}
        for score, cui in zip(row, cuis):
            if allowed is None or cui in allowed:
                best[cui] = max(best.get(cui, -np.inf), score)
        results.append(sorted(best.items(), key=lambda item: -item[1])[:k])
    return results


@pytest.fixture(scope="module")
def flat_index(tiny_kb, tiny_encoder):
    return ConceptIndex.build(tiny_kb, tiny_encoder)


@pytest.fixture(scope="module")
def large_exact(large_kb, tiny_model):
    """The exact index of large_kb, encoded once (batches of 256: at the tiny_encoder's 4 each
    build of its 6,000 names took half a minute); other types are converted from it."""
    from spacy_sapbert.encoders.transformer import TorchEncoder

    return ConceptIndex.build(large_kb, TorchEncoder(tiny_model, batch_size=256))


@pytest.mark.parametrize("k", [1, 3, 10, 50])
def test_flat_search_equals_brute_force(flat_index, tiny_encoder, k):
    vectors = tiny_encoder.encode(QUERIES)
    got = search_concepts(flat_index, vectors, k=k)
    expected = brute_force(flat_index, vectors, k)
    for got_row, expected_row in zip(got, expected):
        assert [c for c, _ in got_row] == [c for c, _ in expected_row]
        np.testing.assert_allclose([s for _, s in got_row], [s for _, s in expected_row], atol=1e-5)
        assert len({c for c, _ in got_row}) == len(got_row) == min(k, len(flat_index.kb))


def test_type_restriction_equals_brute_force(flat_index, tiny_encoder):
    vectors = tiny_encoder.encode(QUERIES)
    chemicals = {c.concept_id for c in flat_index.kb if any(t.startswith("D") for t in c.types)}
    got = search_concepts(flat_index, vectors, k=5, type_prefixes=["D"])
    expected = brute_force(flat_index, vectors, 5, allowed=chemicals)
    assert [[c for c, _ in row] for row in got] == [[c for c, _ in row] for row in expected]
    assert search_concepts(flat_index, vectors, k=5, type_prefixes=["Z99"]) == [[] for _ in QUERIES]


@pytest.fixture(scope="module")
def large_kb(tiny_encoder):
    """3,000 concepts with two made-up names each, from the tiny vocabulary's words."""
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase

    rng = np.random.default_rng(0)
    words = [w for w in tiny_encoder.tokenizer.get_vocab() if w.isalpha() and len(w) > 3]
    return KnowledgeBase(
        Concept(f"X{i}", " ".join(rng.choice(words, 3)), [" ".join(rng.choice(words, 2))], types=["X"])
        for i in range(3000)
    )


# IVF-PQ keeps 8 bytes of a 32-d vector here, among near-duplicate made-up names; chance
# recall is 0.003. Its recall on real 384-d MeSH vectors is measured in benchmarks/.
@pytest.mark.parametrize("index_type,min_recall", [("sq8", 0.9), ("hnsw", 0.9), ("ivfpq", 0.4)])
def test_compressed_indexes_recall_against_exact(large_kb, large_exact, tiny_encoder, index_type, min_recall):
    exact = large_exact
    approx = large_exact.converted(index_type)
    queries = tiny_encoder.encode([f"{c.canonical_name} x" for c in list(large_kb)[:100]])
    truth = [{c for c, _ in row} for row in search_concepts(exact, queries, k=10)]
    found = [{c for c, _ in row} for row in search_concepts(approx, queries, k=10)]
    recall = np.mean([len(t & f) / len(t) for t, f in zip(truth, found)])
    assert recall >= min_recall
    assert all(len(row) == 10 for row in search_concepts(approx, queries, k=10, type_prefixes=["X"]))


def test_round_trip_is_byte_identical(flat_index, tiny_encoder, tmp_path):
    first = flat_index.save(tmp_path / "a")
    loaded = ConceptIndex.load(first, encoder=tiny_encoder)
    second = loaded.save(tmp_path / "b")
    for name in (FAISS_FILE, ROWS_FILE, KB_FILE, META_FILE):
        assert filecmp.cmp(first / name, second / name, shallow=False), name
    vectors = tiny_encoder.encode(QUERIES)
    assert search_concepts(loaded, vectors, k=4) == search_concepts(flat_index, vectors, k=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.text(alphabet="AD0.\U0010ffff\ud7ff", max_size=4), max_size=3), min_size=1, max_size=8),
       st.lists(st.text(alphabet="AD0.\U0010ffff\ud7ff", max_size=3), min_size=1, max_size=3))
def test_type_set_verdicts_are_those_of_startswith(sets, prefixes):
    from spacy_sapbert.search.index import TypeSets

    type_sets = TypeSets.of_sets(sets, list(range(len(sets))))
    assert type_sets.verdicts(prefixes).tolist() == [any(t.startswith(tuple(prefixes)) for t in s) for s in sets]
    assert list(type_sets) == [tuple(s) for s in sets]


def test_concepts_are_read_from_a_compact_copy_in_the_cache(flat_index, tiny_encoder, tmp_path, monkeypatch):
    """A load keeps a compact copy of the concepts file in the cache and reads it afterwards: the
    same ids, types, selectors and links as the file itself gives; a damaged copy is made again,
    and where no cache can be written the file is read as it is."""
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    saved = flat_index.save(tmp_path / "index")
    first = ConceptIndex.load(saved, encoder=tiny_encoder)
    [copy] = (tmp_path / "cache").glob("concepts-*")
    again = ConceptIndex.load(saved, encoder=tiny_encoder)
    (copy / "which.npy").write_bytes(b"damaged")
    repaired = ConceptIndex.load(saved, encoder=tiny_encoder)
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(saved / META_FILE))  # a file, not a folder
    uncached = ConceptIndex.load(saved, encoder=tiny_encoder)
    vectors = tiny_encoder.encode(QUERIES)
    expected_types = [tuple(c.types) for c in flat_index.kb]
    for loaded in (first, again, repaired, uncached):
        assert list(loaded.concept_ids) == list(flat_index.concept_ids)
        assert [loaded.concept_types(i) for i in range(len(loaded.concept_ids))] == expected_types
        assert [loaded.has_type(i, ["D"]) for i in range(len(expected_types))] == [
            any(t.startswith("D") for t in types) for types in expected_types]
        assert loaded.allowed_rows(["D"]) == flat_index.allowed_rows(["D"]) and loaded.resolve_id("nothing") is None
        assert search_concepts(loaded, vectors, k=4, type_prefixes=["D"]) == search_concepts(
            flat_index, vectors, k=4, type_prefixes=["D"])
    assert np.load(copy / "which.npy").tolist() == first._types.which.tolist()


def test_pickle_round_trip(flat_index, tiny_encoder):
    import pickle

    vectors = tiny_encoder.encode(QUERIES)
    assert search_concepts(pickle.loads(pickle.dumps(flat_index)), vectors, k=3) == search_concepts(flat_index, vectors, k=3)


def test_mismatched_model_is_refused(flat_index, tiny_model, tmp_path):
    path = flat_index.save(tmp_path / "idx")
    other = TorchEncoder(tiny_model, pooling="cls")
    with pytest.raises(ConceptIndexError, match=r"was built with model .* not with .*; rebuild it with `spacy-sapbert build-index`"):
        ConceptIndex.load(path, encoder=other)


def test_truncated_and_corrupted_files_are_refused(flat_index, tmp_path):
    path = flat_index.save(tmp_path / "idx")
    data = (path / FAISS_FILE).read_bytes()
    (path / FAISS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ConceptIndexError, match=r"index\.faiss has \d+ bytes but \d+ were written, so it is truncated"):
        ConceptIndex.load(path)
    (path / FAISS_FILE).write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(ConceptIndexError, match=r"index\.faiss does not match the checksum"):
        ConceptIndex.load(path)
    (path / FAISS_FILE).unlink()
    with pytest.raises(ConceptIndexError, match=r"index\.faiss is missing"):
        ConceptIndex.load(path)


def test_not_an_index_and_bad_queries(flat_index, tmp_path):
    with pytest.raises(ConceptIndexError, match=r"is not a concept index \(no meta\.json\)"):
        ConceptIndex.load(tmp_path)
    with pytest.raises(ConceptIndexError, match=r"Query vectors have shape \(1, 7\), but the index holds 32-d"):
        search_concepts(flat_index, np.zeros((1, 7), dtype=np.float32))
    with pytest.raises(ConceptIndexError, match=r"Unknown index type 'lsh'"):
        ConceptIndex.build(flat_index.kb, None, index_type="lsh")


def test_meta_records_what_built_it(flat_index, tiny_encoder):
    meta = flat_index.meta
    assert meta["model_fingerprint"] == tiny_encoder.fingerprint
    assert (meta["pooling"], meta["max_length"], meta["dim"]) == ("mean", 25, 32)
    assert (meta["n_concepts"], meta["n_names"]) == (10, len(flat_index))


def test_converted_index_keeps_names_and_recall(large_kb, large_exact, tiny_encoder, tmp_path):
    exact = large_exact
    compact = exact.converted("hnsw-sq8")
    assert (len(compact), compact.meta["index_type"]) == (len(exact), "hnsw-sq8")
    queries = tiny_encoder.encode([f"{c.canonical_name} x" for c in list(large_kb)[:100]])
    truth = [{c for c, _ in row} for row in search_concepts(exact, queries, k=10)]
    found = [{c for c, _ in row} for row in search_concepts(compact, queries, k=10)]
    assert np.mean([len(t & f) / len(t) for t, f in zip(truth, found)]) >= 0.9
    reloaded = ConceptIndex.load(compact.save(tmp_path / "compact"), encoder=tiny_encoder)
    assert search_concepts(reloaded, queries[:5], k=3) == search_concepts(compact, queries[:5], k=3)
    with pytest.raises(ConceptIndexError, match="approximate vectors"):
        compact.converted("flat")


@pytest.mark.parametrize("index_type", ["flat", "hnsw-sq8"])
def test_memory_mapped_index_searches_the_same(large_kb, large_exact, tiny_encoder, tmp_path, index_type):
    built = large_exact.converted(index_type) if index_type != "flat" else large_exact
    saved = built.save(tmp_path / index_type)
    queries = tiny_encoder.encode([c.canonical_name for c in list(large_kb)[:20]])
    mapped = ConceptIndex.load(saved, encoder=tiny_encoder, mmap=True)
    assert search_concepts(mapped, queries, k=5) == search_concepts(ConceptIndex.load(saved), queries, k=5)


def test_projected_compact_index_unpacks_to_a_graph_over_its_own_codes(large_kb, large_exact, tiny_encoder, tmp_path):
    """A bundled index ships flat 6-bit codes of projected vectors and a gzipped KB; on first use
    it gets its HNSW graph over exactly those codes, searching as the flat codes do."""
    import faiss

    exact = large_exact
    compact = exact.converted("sq6", dim=16)
    assert (compact.meta["projected_dim"], compact.index.d) == (16, 32)  # queries stay 32-d
    saved = compact.save(tmp_path / "bundle", compress_kb=True)
    assert (saved / KB_FILE_GZ).exists() and not (saved / KB_FILE).exists()
    loaded = ConceptIndex.load(saved, encoder=tiny_encoder)
    assert [c.to_dict() for c in loaded.kb] == [c.to_dict() for c in large_kb]
    queries = tiny_encoder.encode([f"{c.canonical_name} x" for c in list(large_kb)[:100]])
    assert search_concepts(loaded, queries, k=5) == search_concepts(compact, queries, k=5)

    graph = loaded.converted("hnsw-sq6")
    assert (graph.meta["index_type"], graph.meta["projected_dim"]) == ("hnsw-sq6", 16)
    codes = [faiss.vector_to_array(faiss.downcast_index(i).codes)
             for i in (faiss.downcast_index(loaded.index).index,
                       faiss.downcast_index(faiss.downcast_index(graph.index).index).storage)]
    np.testing.assert_array_equal(*codes)
    truth = [{c for c, _ in row} for row in search_concepts(loaded, queries, k=10)]
    found = [{c for c, _ in row} for row in search_concepts(graph, queries, k=10, type_prefixes=["X"])]
    assert np.mean([len(t & f) / len(t) for t, f in zip(truth, found)]) >= 0.95
    assert search_concepts(graph, queries[:3], k=5, type_prefixes=["Z"]) == [[], [], []]
    reloaded = ConceptIndex.load(graph.save(tmp_path / "graph"), encoder=tiny_encoder, mmap=True)
    assert search_concepts(reloaded, queries[:5], k=3) == search_concepts(graph, queries[:5], k=3)
    with pytest.raises(ConceptIndexError, match="only hnsw-sq6 over the same codes"):
        loaded.converted("hnsw-sq8")
    with pytest.raises(ConceptIndexError, match="Cannot project 32-d vectors to 64 dimensions"):
        exact.converted("sq8", dim=64)


def test_compact_index_ships_the_links_of_its_graph(large_exact, tiny_encoder, tmp_path):
    """save(graph=True) stores the links of the graph over the codes; unpacking then sets them
    instead of building, and gives the built graph byte for byte. Damaged links fail in one
    sentence, and an exact index has no graph to store."""
    import faiss

    compact = large_exact.converted("sq6", dim=16)
    plain = ConceptIndex.load(compact.save(tmp_path / "plain"), encoder=tiny_encoder)
    shipped = ConceptIndex.load(compact.save(tmp_path / "shipped", graph=True), encoder=tiny_encoder)
    assert plain.stored_links() is None and GRAPH_FILE in shipped.meta["files"]
    built, unpacked = plain.converted("hnsw-sq6"), shipped.converted("hnsw-sq6")
    assert faiss.serialize_index(built.index).tobytes() == faiss.serialize_index(unpacked.index).tobytes()
    # Saved again without graph, the directory no longer claims the links.
    assert not (shipped.save(tmp_path / "shipped").joinpath(GRAPH_FILE)).exists()

    links = dict(ConceptIndex.load(compact.save(tmp_path / "cut", graph=True)).stored_links())
    links["levels"] = links["levels"][:-1]
    with pytest.raises(ConceptIndexError, match="stored graph links do not fit"):
        _graph_over_codes(compact.index, links)
    with pytest.raises(ConceptIndexError, match="Only a scalar-quantised index"):
        large_exact.save(tmp_path / "exact", graph=True)


def test_a_loaded_index_reads_its_kb_only_when_asked(flat_index, tiny_encoder, tmp_path):
    """Linking needs only the concepts' ids and types (concepts.json): the KB is read on first
    use of .kb, and one edited apart from concepts.json fails in one sentence."""
    import json

    from spacy_sapbert.cache import file_records

    saved = flat_index.save(tmp_path / "index")
    loaded = ConceptIndex.load(saved, encoder=tiny_encoder)
    assert loaded._kb is None
    queries = tiny_encoder.encode(QUERIES)
    assert (search_concepts(loaded, queries, k=3, type_prefixes=["D"])
            == search_concepts(flat_index, queries, k=3, type_prefixes=["D"]))
    assert loaded._kb is None
    assert [c.concept_id for c in loaded.kb] == flat_index.concept_ids

    meta = json.loads((saved / META_FILE).read_text())
    lines = (saved / KB_FILE).read_text().splitlines()
    (saved / KB_FILE).write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    meta["files"] = {k: v for k, v in meta["files"].items() if k != KB_FILE}
    meta["files"].update(file_records(saved, [KB_FILE]))
    (saved / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConceptIndexError, match="does not hold the concepts of concepts.json"):
        ConceptIndex.load(saved).kb


def test_other_ids_resolve_without_reading_the_kb(tiny_kb, tiny_encoder, tmp_path):
    """A names table's older ids are resolved when the pipe loads: from concepts.json, so that
    the KB (60 MB for the bundled index) is not read for them."""
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase

    kb = KnowledgeBase([Concept(c.concept_id, c.canonical_name, list(c.aliases), list(c.types),
                                alt_ids=[f"OMIM:{i}", "MONDO:1"]) for i, c in enumerate(tiny_kb)])
    index = ConceptIndex.build(kb, tiny_encoder)
    loaded = ConceptIndex.load(index.save(tmp_path / "index"), encoder=tiny_encoder)
    alternatives = kb.alternative_ids()
    assert alternatives["MONDO:1"] == index.concept_ids[0]  # the first concept to hold it
    for concept_id in [*alternatives, *index.concept_ids, "D999999"]:
        assert loaded.resolve_id(concept_id) == kb.resolve_id(concept_id)
    assert loaded._kb is None


def test_an_index_without_its_concepts_file_is_refused_and_the_bundled_one_has_it(tiny_index_dir, tmp_path):
    import json
    import shutil

    from spacy_sapbert.kb.bundled import bundled_index_meta

    old = shutil.copytree(tiny_index_dir, tmp_path / "old")
    (old / "concepts.json").unlink()
    meta = json.loads((old / "meta.json").read_text(encoding="utf-8"))
    del meta["files"]["concepts.json"]
    (old / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(ConceptIndexError, match=r"keeps no concepts.json \(an index of the unpublished 0.1\); rebuild it"):
        ConceptIndex.load(old)
    bundled = bundled_index_meta()
    assert bundled is None or "concepts.json" in bundled["files"]
    if bundled is not None:  # and it resolves other ids without its KB
        from spacy_sapbert.assets import BUNDLED_INDEX

        stored = json.loads((BUNDLED_INDEX / "concepts.json").read_text(encoding="utf-8"))
        assert len(stored["alt_ids"]) == len(stored["alt_positions"]) > 30000
        # and the rows' names, keys and answers, so that first use reads no KB
        from spacy_sapbert.search.index import ROW_FILES

        assert set(ROW_FILES) <= set(bundled["files"])


def test_row_files_spare_the_kb_on_first_use(large_kb, large_exact, tiny_encoder, tmp_path):
    """save(row_files=True) stores the rows' names and keys and the answer scheme's answers; an
    index loaded with them, and the graph unpacked over its codes and saved (the first use of a
    bundled index), give what the KB gives without reading it: the KB file is copied, not parsed."""
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
    from spacy_sapbert.kb.schemes import index_answers, scheme_answers
    from spacy_sapbert.search.index import ANSWERS_FILE, ROW_KEYS_FILE, ROW_NAMES_FILE

    top = next(iter(large_kb)).concept_id
    scheme = [f"{top}$"]  # every other concept answers as the first, its broader concept
    kb = KnowledgeBase([Concept(c.concept_id, c.canonical_name, list(c.aliases), list(c.types), broader=[top])
                        if i else c for i, c in enumerate(large_kb)])
    compact = ConceptIndex(kb, large_exact.index, large_exact.row_concepts, dict(large_exact.meta)).converted("sq6", dim=16)
    compact.meta["answer_scheme"] = scheme
    saved = compact.save(tmp_path / "compact", compress_kb=True, graph=True, row_files=True)
    assert {ROW_NAMES_FILE, ROW_KEYS_FILE, ANSWERS_FILE} <= set(ConceptIndex.load(saved).meta["files"])
    plain = ConceptIndex.load(compact.save(tmp_path / "plain", compress_kb=True, graph=True))
    for loaded in (ConceptIndex.load(saved), ConceptIndex.load(saved).converted("hnsw-sq6")):
        assert loaded.row_names() == plain.row_names() and len(loaded.row_names()) == len(loaded)
        assert (loaded.row_keys() == plain.row_keys()).all()
        assert index_answers(loaded, scheme) == scheme_answers(kb, scheme) != {}
        assert loaded._kb is None
    graph = ConceptIndex.load(saved).converted("hnsw-sq6").save(tmp_path / "graph")
    assert filecmp.cmp(graph / KB_FILE_GZ, saved / KB_FILE_GZ, shallow=False)
    again = ConceptIndex.load(graph, encoder=tiny_encoder)
    assert again.row_names() == plain.row_names() and again._kb is None
    assert [c.concept_id for c in again.kb] == compact.concept_ids
    assert again.resolve_id(compact.concept_ids[3]) == compact.concept_ids[3]


def test_the_graph_cache_is_keyed_by_the_answers_it_copies():
    """The cached graph folder copies the index's concepts, row names and answers: another copy of
    any of them (a newer index package) is another folder, never a stale one."""
    from spacy_sapbert.search.resolve import _graph_cache

    files = {"index.faiss": {"sha256": "a" * 64}, "concepts.json": {"sha256": "b" * 64}, "names.txt.gz": {"sha256": "c" * 64}}
    meta = {"files": files, "index_type": "sq6"}
    folders = {_graph_cache(meta)} | {_graph_cache({**meta, "files": {**files, "answers.json.gz": {"sha256": digit * 64}}})
                                      for digit in "de"}
    assert len(folders) == 3


def test_row_names_and_type_sets_read_as_before(tmp_path, monkeypatch):
    import gzip

    from spacy_sapbert.cache import file_sha256
    from spacy_sapbert.search.index import RowNames, numbered_type_sets, stored_type_sets

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    names = ["lactic acidosis", "café au lait", "", "type 2 diabetes"]
    path = tmp_path / "names.txt.gz"
    path.write_bytes(gzip.compress("\n".join(names).encode("utf-8"), mtime=0))
    assert RowNames(path).all() == names and RowNames(path)[1] == "café au lait"
    # With its checksum, unzipped once into the cache and read from there; a damaged copy is made again.
    sha = file_sha256(path)
    assert RowNames(path, sha).all() == names and RowNames(path, sha).take([3, 1]) == [names[3], names[1]]
    [copy] = (tmp_path / "cache").glob("row-names-*")
    (copy / "names.txt").write_bytes(b"lactic acidosis\ncafe")
    assert RowNames(path, sha).all() == names and (copy / "names.txt").read_bytes() == "\n".join(names).encode()
    # Where no cache can be written, unzipped in memory as without a checksum.
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(path))  # a file, not a folder
    assert RowNames(path, sha).all() == names
    # A file of two gzip members (zlib alone reads the first) is read whole.
    path.write_bytes(gzip.compress("\n".join(names[:2]).encode("utf-8") + b"\n")
                     + gzip.compress("\n".join(names[2:]).encode("utf-8")))
    assert RowNames(path).all() == names

    types = [["T047"], ["T121", "T109"], ["T047"], [], ["T121", "T109"], ["T109", "T121"]]
    sets, which = numbered_type_sets(types, len(types))
    assert sets == [("T047",), ("T121", "T109"), (), ("T109", "T121")] and which.tolist() == [0, 1, 0, 2, 1, 3]
    stored = stored_type_sets({"types": types})
    assert list(stored) == [tuple(t) for t in types] and [stored.of_set(i) for i in range(stored.n_sets)] == sets
    assert list(stored_type_sets({"type_sets": [list(s) for s in sets], "type_set": [0, 1, 0, 2, 1, 3]})) == list(stored)
    # A set is in where one of its types starts with a prefix asked for; a set without types never is.
    assert stored.verdicts(["T12"]).tolist() == [False, True, False, True]
    assert stored.verdicts(["T047", "T109"]).tolist() == [True, True, False, True]
    assert stored.verdicts([""]).tolist() == [True, True, False, True] and not stored.verdicts(["X"]).any()
