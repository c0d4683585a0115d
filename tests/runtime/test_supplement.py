"""An index with a supplement (search.supplement): more names in a compact layout, searched
beside the index, leaving the index's own links as they were."""
import json

import numpy as np
import pytest

from conftest import TINY_CONCEPTS, demo_linker

ASPIRIN = "D001241"


@pytest.fixture(scope="module")
def supplemented_dir(tiny_encoder, tmp_path_factory):
    """The tiny index without aspirin, and a supplement holding aspirin and a brand name of
    metformin (a concept of the index)."""
    from spacy_sapbert.assets import MESH_LABEL_TYPES
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
    from spacy_sapbert.search.index import ConceptIndex
    from spacy_sapbert.search.supplement import SUPPLEMENT_DIR, save_supplement

    main_kb = KnowledgeBase([Concept(**c) for c in TINY_CONCEPTS if c["concept_id"] != ASPIRIN], name="tiny")
    aspirin = next(c for c in TINY_CONCEPTS if c["concept_id"] == ASPIRIN)
    extra = KnowledgeBase([Concept(**aspirin), Concept("D008687", "riomet", [], ["D02.078.370.141.450"])],
                          name="tiny-supplement")
    folder = tmp_path_factory.mktemp("supplemented")
    main = ConceptIndex.build(main_kb, tiny_encoder)
    main.meta["label_types"] = MESH_LABEL_TYPES
    main.save(folder)
    supplement = ConceptIndex.build(extra, tiny_encoder)
    supplement.meta["label_types"] = MESH_LABEL_TYPES
    save_supplement(supplement, folder / SUPPLEMENT_DIR)
    return folder


def test_the_supplement_adds_concepts_and_names(tiny_model, supplemented_dir):
    from spacy_sapbert.search.supplement import SupplementedIndex

    nlp, pipe = demo_linker(tiny_model, supplemented_dir, k=3, max_entities_per_mention=3)
    index = pipe.generator.index
    assert isinstance(index, SupplementedIndex)
    assert index.concept_ids[-1] == ASPIRIN and len(index.concept_ids) == len(TINY_CONCEPTS)
    # Exact names are found in the supplement (the concept only it holds, and a brand name).
    assert pipe.generator.ranked([("acetylsalicylic acid", ("D",))])[0][0] == (ASPIRIN, 1.0)
    assert pipe.generator.ranked([("Riomet", ("D",))])[0][0] == ("D008687", 1.0)
    # A Disease mention never searches it: only chemicals are there.
    assert ASPIRIN not in [c for c, _ in pipe.generator.ranked([("aspirin", ("C",))])[0]]
    # Its concepts are in the pipe's KB, named by their rows; their ids resolve.
    cui, name, aliases, types, _ = pipe.kb.cui_to_entity[ASPIRIN]
    assert (cui, name, aliases, types) == (ASPIRIN, "Aspirin", ["acetylsalicylic acid"], ["D02.241.223.100.050"])
    assert len(pipe.kb) == len(index.concept_ids) and ASPIRIN in pipe.kb
    assert pipe.kb.alias_to_cuis["acetylsalicylic acid"] == {ASPIRIN}  # merged when first asked for
    assert pipe.resolve_id(ASPIRIN) == ASPIRIN


def test_the_supplement_s_positions_are_kept_in_the_cache(tiny_encoder, supplemented_dir, tmp_path, monkeypatch):
    """Where each supplement concept lies among the index's is found once and kept in the cache;
    a damaged copy is found again, and without a writable cache it is found on every load."""
    from spacy_sapbert.search.index import ConceptIndex
    from spacy_sapbert.search.supplement import SUPPLEMENT_DIR, SupplementedIndex

    def loaded():
        main = ConceptIndex.load(supplemented_dir, encoder=tiny_encoder)
        return SupplementedIndex(main, ConceptIndex.load(supplemented_dir / SUPPLEMENT_DIR, encoder=tiny_encoder))

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    first = loaded()
    [copy] = (tmp_path / "cache").glob("supplement-positions-*")
    again = loaded()
    np.save(copy / "positions.npy", np.array([7, 7]))
    repaired = loaded()
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(supplemented_dir / "meta.json"))  # a file, not a folder
    uncached = loaded()
    for index in (first, again, repaired, uncached):
        assert list(index.concept_ids) == list(first.concept_ids) and index.concept_ids[-1] == ASPIRIN
        assert index.row_concepts.tolist() == first.row_concepts.tolist()
    # riomet names metformin, a concept of the index; aspirin is the supplement's own.
    assert np.load(copy / "positions.npy").tolist() == [-1, list(first.main.concept_ids).index("D008687")]


def test_the_keys_of_both_are_held_once(tiny_model, supplemented_dir):
    from spacy_sapbert.kb.concepts import name_hash

    _, pipe = demo_linker(tiny_model, supplemented_dir)
    index = pipe.generator.index
    keys = index.row_keys()
    assert list(keys) == [name_hash(n) for n in index.main.row_names()] + [name_hash(n) for n in index.names.all()]
    # The main index's keys and the supplement's are views of the whole, not copies of it.
    assert np.shares_memory(index.main.row_keys(), keys) and np.shares_memory(index._keys, keys)
    for row in range(len(index)):
        assert row in index.rows_named(int(keys[row]))
    assert index.named_among(np.append(keys, np.uint64(12345))).tolist() == [True] * len(index) + [False]


def test_links_the_index_holds_are_unchanged(tiny_model, supplemented_dir):
    """Mentions whose rows are all the index's own link as without the supplement."""
    with_it = demo_linker(tiny_model, supplemented_dir, k=5)[0]
    without = demo_linker(tiny_model, supplemented_dir, k=5, index={"index": str(supplemented_dir),
                                                                    "supplement": False})[0]
    text = "Acute renal failure and lactic acidosis in type 2 diabetes."
    assert [e._.kb_ents for e in with_it(text).ents] == [e._.kb_ents for e in without(text).ents]
    assert ASPIRIN not in without.get_pipe("sapbert_linker").generator.index.concept_ids


def test_the_hybrid_score_names_the_supplement_s_rows(tiny_model, supplemented_dir):
    """The hybrid score transforms a supplement row's name when a search hits it, with the
    index's own vocabulary and idf; the index's rows keep their fitted vectors."""
    _, pipe = demo_linker(tiny_model, supplemented_dir, scoring={"sparse_weight": 0.5})
    index, hybrid = pipe.generator.index, pipe.generator.hybrid
    rescore = hybrid.for_texts(["acetylsalicylic acid", "metformin"])
    rows = np.array([[len(index.main) + 1, 0], [0, -1]])  # "acetylsalicylic acid" in the supplement
    scores = rescore(np.array([0, 1]), rows, np.zeros((2, 2), dtype=np.float32))
    assert scores[0, 0] == pytest.approx(0.5 / 1.5) and scores[1, 1] == -np.inf
    assert hybrid.name_vectors.shape[0] == len(index.main)


def test_search_merges_both_best_first(tiny_model, supplemented_dir):
    _, pipe = demo_linker(tiny_model, supplemented_dir)
    index = pipe.generator.index
    vectors = pipe.generator.encoder.encode(["aspirin", "metformin"])
    scores, rows = index.search_rows(vectors, 4)
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert (rows >= len(index.main)).any() and rows.max() < len(index)
    assert index.allowed_rows(("D",)) == index.main.allowed_rows(("D",)) + 3


def test_a_document_s_queries_search_both_side_by_side_as_one_after_the_other(tiny_model, supplemented_dir):
    _, pipe = demo_linker(tiny_model, supplemented_dir)
    index = pipe.generator.index
    vectors = pipe.generator.encoder.encode(["aspirin", "metformin", "riomet", "lactic acidosis"])
    assert index.side_by_side
    # ("D",): the index and the supplement side by side; ("C",): no supplement row may answer, so
    # the index's queries are searched in two halves side by side.
    for types in (("D",), ("C",), None):
        together = index.search_rows(vectors, 4, types)
        index.side_by_side = False
        try:
            apart = index.search_rows(vectors, 4, types)
        finally:
            index.side_by_side = True
        for a, b in zip(together, apart):
            np.testing.assert_array_equal(a, b)
    assert index.supplement.allowed_rows(("C",)) == 0 < index.main.allowed_rows(("C",))


def test_a_saved_pipeline_keeps_the_supplement(tiny_model, supplemented_dir, tmp_path):
    import spacy

    nlp, _ = demo_linker(tiny_model, supplemented_dir)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline").get_pipe("sapbert_linker")
    assert loaded.generator.index.concept_ids[-1] == ASPIRIN


def test_the_supplement_records_its_files(supplemented_dir):
    from spacy_sapbert.search.index import verify_files

    folder = supplemented_dir / "supplement"
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta["files"]) == {"index.faiss", "rows.npy", "concepts.json", "concept_ids.npy", "names.txt.gz", "keys.npy"}
    assert verify_files(folder, meta) is None
    # The ids packed, not in concepts.json: a load makes no str per concept.
    assert "concept_ids" not in json.loads((folder / "concepts.json").read_text())


def test_pack_writes_a_compact_supplement(tiny_index_dir, tiny_model, tmp_path, caplog):
    """The project's `pack` turns a flat index into a supplement of product-quantised codes in
    inverted lists, which an index then searches."""
    import shutil

    from typer.testing import CliRunner

    from spacy_sapbert_training.data.chemicals import app

    main = tmp_path / "main"
    shutil.copytree(tiny_index_dir, main)
    result = CliRunner().invoke(app, ["pack", str(tiny_index_dir), str(main / "supplement"), "--dim", "16",
                                      "--pq-bytes", "8", "--nprobe", "1"])
    assert result.exit_code == 0, result.output
    meta = json.loads((main / "supplement" / "meta.json").read_text())
    assert meta["index_type"] == "ivfpq" and meta["pq_bytes"] == 8 and meta["projected_dim"] == 16
    _, pipe = demo_linker(tiny_model, main)
    assert len(pipe.generator.index) == 2 * meta["n_names"]
    assert pipe.generator.ranked([("metformin", ("D",))])[0][0][0] == "D008687"


def test_the_chemicals_kb_adds_what_the_index_lacks(monkeypatch):
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
    from spacy_sapbert_training.data import chemicals

    linking = KnowledgeBase([Concept("D008687", "Metformin", ["glucophage"], ["D02.078"]),
                             Concept("D003920", "Diabetes Mellitus", [], ["C18.452"])])
    supplementary = KnowledgeBase([Concept("C000001", "aspirin-X", [], ["D02.241"]),
                                   Concept("C000002", "some syndrome", [], ["C10.1"]),
                                   Concept("D008687", "Metformin", [], ["D02.078"])])
    monkeypatch.setattr(chemicals, "drug_name_variants", lambda: {
        "metformin": ["Glucophage", "Riomet"], "aspirin-X": ["Ecotrin-X"], "unknown": ["nothing"]})
    kb = chemicals.chemicals_kb(linking, supplementary)
    assert [(c.concept_id, c.names) for c in kb] == [("C000001", ["aspirin-X", "Ecotrin-X"]),
                                                     ("D008687", ["Riomet"])]


def test_a_names_table_reads_the_supplement_s_ids_as_the_index_s(supplemented_dir):
    """An id only the supplement holds is no older id to a names table: the table builder reads
    the index's KB with the supplement's concepts (named by their rows)."""
    from spacy_sapbert.search.supplement import supplement_concepts
    from spacy_sapbert_training.data.names import index_kb

    added = supplement_concepts(supplemented_dir / "supplement", known={"D008687"})
    assert [(c.concept_id, c.names) for c in added] == [(ASPIRIN, ["Aspirin", "acetylsalicylic acid"])]
    kb, _ = index_kb(str(supplemented_dir))
    assert kb.resolve_id(ASPIRIN) == ASPIRIN and len(kb) == len(TINY_CONCEPTS)


def test_info_shows_the_supplement(supplemented_dir):
    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    result = CliRunner().invoke(app, ["info", str(supplemented_dir)])
    assert result.exit_code == 0 and "supplement" in result.output and "3 names" in " ".join(result.output.split())


def test_a_supplemented_index_pickles_into_another_process(tiny_model, supplemented_dir):
    """nlp.pipe(n_process=…) where processes are spawned (macOS, Windows) pickles the pipe: the
    supplement's concepts are found there too (ids looked up by a checksum, not the salted hash)."""
    import pickle
    import subprocess
    import sys

    _, pipe = demo_linker(tiny_model, supplemented_dir)
    path = supplemented_dir.parent / "index.pickle"
    path.write_bytes(pickle.dumps(pipe.generator.index))
    code = f"import pickle; index = pickle.load(open({str(path)!r}, 'rb')); assert index.resolve_id({ASPIRIN!r}) == {ASPIRIN!r}"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""})


def test_packed_ids_find_their_positions_stored_in_any_order():
    from spacy_sapbert.search.supplement import PackedIds

    for ids in (["C000002", "C000006", "D066257"], ["MONDO:0005148", "C000006", "é-12", "C000002"], []):
        packed = PackedIds(ids)
        assert list(packed) == ids and len(packed) == len(ids) and packed[:2] == ids[:2]
        assert [packed.position(i) for i in ids] == list(range(len(ids)))
        assert packed.position("C000003") is None and packed.position("ZZZ") is None and packed.position("") is None
