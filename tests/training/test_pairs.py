import gzip
import itertools
import logging

import pytest
from typer.testing import CliRunner

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.kb.formats import read_jsonl, write_jsonl
from spacy_sapbert_training.data.datasets import Mention
from spacy_sapbert_training.data.ontology import (
    absorb_mesh_twins,
    load_source,
    merge_ontologies,
    read_mesh_mappings,
    reference_key,
)
from spacy_sapbert_training.data.pairs import (
    PairFormatError,
    PairStats,
    app,
    mention_pairs,
    read_pairs,
    synonym_pairs,
    write_pairs,
)

TWELVE = Concept("D000012", "name 0", [f"name {i}" for i in range(1, 12)])


# -- synonym pairs -----------------------------------------------------------------------

def test_a_concept_with_twelve_names_gives_fifty_distinct_pairs_within_it():
    pairs = synonym_pairs(KnowledgeBase([TWELVE]), max_per_concept=50)
    assert len(pairs) == 50
    assert len({frozenset(p[1:]) for p in pairs}) == 50
    names = set(TWELVE.names)
    assert all(cui == "D000012" and a in names and b in names and a != b for cui, a, b in pairs)
    # Each pair is listed once, in name order, as itertools.combinations would.
    positions = [(TWELVE.names.index(a), TWELVE.names.index(b)) for _, a, b in pairs]
    assert positions == sorted(positions) and all(i < j for i, j in positions)


def test_the_sample_is_seeded_and_independent_of_concept_order(tiny_kb):
    concepts = list(tiny_kb) + [TWELVE]
    forward = synonym_pairs(KnowledgeBase(concepts), max_per_concept=50, seed=3)
    backward = synonym_pairs(KnowledgeBase(reversed(concepts)), max_per_concept=50, seed=3)
    assert forward == backward
    assert forward == synonym_pairs(KnowledgeBase(concepts), max_per_concept=50, seed=3)
    other_seed = synonym_pairs(KnowledgeBase(concepts), max_per_concept=50, seed=4)
    assert [p for p in forward if p[0] == "D000012"] != [p for p in other_seed if p[0] == "D000012"]
    # Concepts under the cap keep all their pairs whatever the seed.
    assert [p for p in forward if p[0] != "D000012"] == [p for p in other_seed if p[0] != "D000012"]


def test_uncapped_concepts_give_every_pair_and_one_name_gives_none(tiny_kb):
    kb = KnowledgeBase(list(tiny_kb) + [Concept("D999999", "Lonely")])
    pairs = synonym_pairs(kb)
    expected = {
        (c.concept_id, a, b) for c in tiny_kb for a, b in itertools.combinations(c.names, 2)
    }
    assert set(pairs) == expected and len(pairs) == len(expected)
    assert not any(cui == "D999999" for cui, _, _ in pairs)
    stats = PairStats.of(kb, pairs)
    assert (stats.concepts, stats.concepts_with_pairs, stats.capped) == (11, 10, 0)
    assert stats.pairs == len(expected) and f"{len(expected)} pairs" in stats.summary()


def test_case_variants_give_no_self_pair():
    kb = KnowledgeBase([Concept("D1", "Cancer", ["cancer", "CANCER", "tumour"])])
    assert synonym_pairs(kb) == [("D1", "Cancer", "tumour")]


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="max_per_concept is 0; give at least 1"):
        synonym_pairs(KnowledgeBase([TWELVE]), max_per_concept=0)


# -- pairs files -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pairs.txt", "pairs.txt.gz"])
def test_pairs_round_trip(tmp_path, tiny_kb, name):
    pairs = synonym_pairs(tiny_kb) + [("D1", "Ménière disease", "Sjögren α-syndrome")]
    path = write_pairs(pairs, tmp_path / name)
    assert read_pairs(path) == pairs
    if name.endswith(".gz"):
        assert gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()[-1] == (
            "D1||Ménière disease||Sjögren α-syndrome"
        )
        # Same pairs, same bytes: the gzip header carries no time stamp.
        again = write_pairs(pairs, tmp_path / "again.txt.gz")
        assert again.read_bytes() == path.read_bytes()


def test_a_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("D1||fever||pyrexia\n\nD2||headache\n", encoding="utf-8")
    with pytest.raises(PairFormatError, match=r"pairs\.txt:3: expected 'cui\|\|name1\|\|name2'"):
        read_pairs(path)


def test_an_empty_name_in_a_file_is_malformed(tmp_path):
    path = tmp_path / "pairs.txt.gz"
    path.write_bytes(gzip.compress(b"D1||fever||\n"))
    with pytest.raises(PairFormatError, match=r"pairs\.txt\.gz:1: expected"):
        read_pairs(path)


def test_a_plain_file_named_gz_is_refused(tmp_path):
    path = tmp_path / "pairs.txt.gz"
    path.write_text("D1||fever||pyrexia\n", encoding="utf-8")
    with pytest.raises(PairFormatError, match="is not a complete gzip file"):
        read_pairs(path)


@pytest.mark.parametrize("name", ["fever||pyrexia", "fever|", "fe\nver"])
def test_a_name_that_cannot_be_written_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match=r"Concept 'D1' has the name or id .* cannot be written"):
        write_pairs([("D1", "ague", name)], tmp_path / "pairs.txt")
    assert not (tmp_path / "pairs.txt").exists()


# -- merging -----------------------------------------------------------------------------

def mesh_kb():
    return KnowledgeBase([
        Concept("D003924", "Diabetes Mellitus, Type 2", ["NIDDM"], types=["C19.246.300"]),
        Concept("D006973", "Hypertension", types=["C14.907.489"]),
        Concept("D001241", "Aspirin", types=["D02.241.223.100.050"]),
    ], name="mesh")


def test_a_mondo_concept_merges_into_the_mesh_concept_it_xrefs():
    mondo = KnowledgeBase([
        Concept("MONDO:0005148", "type 2 diabetes mellitus", ["T2DM", "niddm"], types=["MONDO"],
                xrefs=["MESH:D003924", "OMIM:125853", "UMLS:C0011860"]),
        Concept("MONDO:0000001", "disease", types=["MONDO"], xrefs=["OMIM:999999"]),
    ], name="mondo")
    merged = merge_ontologies([mesh_kb(), mondo])
    assert len(merged) == 4
    concept = merged.cui_to_entity["D003924"]
    assert concept.canonical_name == "Diabetes Mellitus, Type 2"
    assert concept.aliases == ["NIDDM", "type 2 diabetes mellitus", "T2DM", "niddm"]
    assert concept.types == ["C19.246.300", "MONDO"]
    for alt in ("MONDO:0005148", "OMIM:125853", "C0011860"):
        assert merged.resolve_id(alt) == "D003924"
    # An unmerged concept's OMIM cross-reference resolves to it too.
    assert merged.resolve_id("OMIM:999999") == "MONDO:0000001"


def test_a_mesh_target_of_two_mondo_concepts_merges_neither(caplog):
    mondo = KnowledgeBase([
        Concept("MONDO:1", "high blood pressure", xrefs=["MESH:D006973"]),
        Concept("MONDO:2", "essential hypertension", xrefs=["MSH:D006973"]),
    ], name="mondo")
    with caplog.at_level(logging.INFO, logger="spacy_sapbert_training.data.ontology"):
        merged = merge_ontologies([mesh_kb(), mondo])
    assert len(merged) == 5
    assert merged.cui_to_entity["D006973"].names == ["Hypertension"]
    assert merged.resolve_id("MONDO:1") == "MONDO:1"
    assert "1 cross-references skipped as not 1:1" in caplog.text
    assert "largest 1" in caplog.text


def test_a_merged_concept_holds_one_concept_per_source(caplog):
    # MONDO:1 points at two MeSH descriptors through two 1:1 cross-references; joining both
    # would chain two distinct descriptors into one concept.
    mondo = KnowledgeBase([
        Concept("MONDO:1", "hypertensive diabetes", xrefs=["MESH:D003924", "MESH:D006973"]),
    ], name="mondo")
    with caplog.at_level(logging.INFO, logger="spacy_sapbert_training.data.ontology"):
        merged = merge_ontologies([mesh_kb(), mondo])
    assert {"D003924", "D006973"} <= set(merged.cui_to_entity)
    assert len(merged) == 3
    assert "1 links refused as joining two concepts of one source" in caplog.text
    assert "largest 2" in caplog.text


def test_shared_outside_ids_and_extra_links_merge_across_sources(tmp_path):
    mondo = KnowledgeBase([Concept("MONDO:7", "hypertension", xrefs=["OMIM:145500", "DOID:10763"])], name="mondo")
    doid = KnowledgeBase([Concept("DOID:10763", "hypertension", ["HTN"], xrefs=["UMLS_CUI:C0020538"])], name="doid")
    chebi = KnowledgeBase([Concept("CHEBI:15365", "acetylsalicylic acid", ["aspirin"])], name="chebi")
    mappings = tmp_path / "mesh_mappings.tsv"
    mappings.write_text("MESH\tD001241\tAspirin\tCHEBI\tCHEBI:15365\tacetylsalicylic acid\n", encoding="utf-8")
    links = read_mesh_mappings(mappings)
    assert links == [("MESH:D001241", "CHEBI:15365")]
    merged = merge_ontologies([mesh_kb(), mondo, doid, chebi], extra_links=links)
    assert merged.resolve_id("CHEBI:15365") == "D001241"
    assert merged.cui_to_entity["D001241"].aliases == ["acetylsalicylic acid", "aspirin"]
    # MONDO and DOID join through MONDO's DOID cross-reference; MONDO is earlier, so its id stays.
    assert merged.resolve_id("DOID:10763") == "MONDO:7"
    assert merged.resolve_id("OMIM:145500") == "MONDO:7" and merged.resolve_id("C0020538") == "MONDO:7"


def test_a_merged_kb_survives_a_jsonl_round_trip(tmp_path):
    mondo = KnowledgeBase([Concept("MONDO:0005148", "T2DM", xrefs=["MESH:D003924", "OMIM:125853"])], name="mondo")
    path = write_jsonl(merge_ontologies([mesh_kb(), mondo]), tmp_path / "open.jsonl")
    assert read_jsonl(path).resolve_id("OMIM:125853") == "D003924"


@pytest.mark.parametrize("ref,key", [
    ("D012345", "MESH:D012345"), ("MSH:C562406", "MESH:C562406"), ("C000596987", "MESH:C000596987"),
    ("C0012634", "UMLS:C0012634"), ("UMLS_CUI:C0012634", "UMLS:C0012634"), ("123456", "OMIM:123456"),
    ("OMIM:PS116200", "OMIMPS:116200"), ("doid:4", "DOID:4"),
])
def test_reference_keys_spell_each_vocabulary_one_way(ref, key):
    assert reference_key(ref) == key


def test_an_unknown_source_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"Unknown ontology source 'meshy'; use one of mesh, mesh-supplementary, .*umls:DIR"):
        load_source("meshy")


def test_sources_read_jsonl_and_umls_folders(tmp_path, tiny_kb_file):
    assert len(load_source(str(tiny_kb_file))) == 10
    row = "C0011849|ENG|P|L0011849|PF|S0011849|Y|A0011849||||MSH|MH|D003920|Diabetes Mellitus|0|N|256|\n"
    (tmp_path / "MRCONSO.RRF").write_text(row, encoding="utf-8")
    (tmp_path / "MRSTY.RRF").write_text("C0011849|T047|B2.2.1.2.1|Disease or Syndrome|AT1|256|\n", encoding="utf-8")
    umls = load_source(f"umls:{tmp_path}")
    assert umls.cui_to_entity["C0011849"].types == ["T047"]


# -- fine-tuning pairs -------------------------------------------------------------------

def mention(text, ids, composite=False, start=0):
    return Mention("doc", start, start + len(text), text, "Disease", ids, composite)


def test_mention_pairs_count_unknown_ids_and_composite_mentions(tiny_kb, caplog):
    mentions = [
        mention("NIDDM", ["D003924"]),
        mention("lactic acidosis", ["D000140"], start=10),
        mention("breast and ovarian cancer", ["D001943", "D010051"], composite=True),
        mention("fever", ["OMIM:000000"]),
    ]
    with caplog.at_level(logging.WARNING, logger="spacy_sapbert_training.data.pairs"):
        pairs, stats = mention_pairs(mentions, tiny_kb, names_per_mention=2)
    assert (stats.mentions, stats.used, stats.composite, stats.unknown) == (4, 2, 1, 1)
    assert "OMIM:000000" in caplog.text and "1 of 4 mentions" in caplog.text
    niddm = [p for p in pairs if p[1] == "NIDDM"]
    assert len(niddm) == 2 and niddm[0] == ("D003924", "NIDDM", "Diabetes Mellitus, Type 2")
    assert niddm[1][2] in ("type 2 diabetes", "non-insulin-dependent diabetes mellitus")
    # The mention is the concept's alias, so the canonical name is its only other name.
    assert [p for p in pairs if p[1] == "lactic acidosis"] == [("D000140", "lactic acidosis", "Acidosis, Lactic")]
    assert stats.pairs == len(pairs) == 3


def test_mention_pairs_resolve_alternative_ids_and_drop_repeats():
    kb = KnowledgeBase([Concept("D1", "Fever", ["pyrexia"], alt_ids=["OMIM:1"])])
    pairs, stats = mention_pairs([mention("fever", ["OMIM:1"]), mention("fever", ["D1"], start=9)], kb)
    assert pairs == [("D1", "fever", "pyrexia")]
    assert stats.duplicates == 1


# -- command line ------------------------------------------------------------------------

def test_pretrain_command_writes_pairs(tmp_path, tiny_kb):
    kb_path = write_jsonl(KnowledgeBase(list(tiny_kb) + [TWELVE]), tmp_path / "kb.jsonl")
    output = tmp_path / "out" / "pairs.txt.gz"
    result = CliRunner().invoke(app, ["pretrain", str(kb_path), "--output", str(output), "--max-per-concept", "20"])
    assert result.exit_code == 0, result.output
    pairs = read_pairs(output)
    assert pairs == synonym_pairs(read_jsonl(kb_path), max_per_concept=20)
    printed = " ".join(result.output.split())  # wasabi wraps long lines
    assert f"{len(pairs)} pairs from 11 of 11 concepts (41 distinct names); 1 capped at 20 pairs" in printed


def test_pretrain_command_reports_a_missing_kb(tmp_path):
    result = CliRunner().invoke(app, ["pretrain", str(tmp_path / "no.jsonl"), "--output", str(tmp_path / "p.txt")])
    assert result.exit_code == 1
    assert "no.jsonl does not exist; check the path" in " ".join(result.output.split())
    assert not (tmp_path / "p.txt").exists()


def test_a_mesh_source_without_trees_or_an_unknown_source_is_refused():
    with pytest.raises(ValueError, match="names no MeSH tree"):
        load_source("mesh:")
    with pytest.raises(ValueError, match="Unknown ontology source 'mondo:C'"):
        load_source("mondo:C")


def test_a_mondo_concept_whose_mesh_xrefs_name_one_mesh_concept_folds_into_it():
    kb = KnowledgeBase([
        Concept("D007863", "Lecithin Cholesterol Acyltransferase Deficiency", types=["C18"]),
        Concept("D001943", "Breast Neoplasms", types=["C04"]),
        Concept("MONDO:1", "LCAT deficiency variant", types=["MONDO"], xrefs=["MESH:D007863", "OMIM:1"]),
        Concept("MONDO:2", "two targets", types=["MONDO"], xrefs=["MESH:D007863", "MESH:D001943"]),
        Concept("MONDO:3", "breast cancer", types=["MONDO"], xrefs=["UMLS:C0006142"]),
    ])
    folded, n = absorb_mesh_twins(kb)
    assert n == 1 and len(folded) == 4
    assert folded.resolve_id("MONDO:1") == "D007863"
    assert "LCAT deficiency variant" in folded.cui_to_entity["D007863"].names
    # several MeSH targets, or none, leave the concept as it is
    assert folded.resolve_id("MONDO:2") == "MONDO:2" and folded.resolve_id("MONDO:3") == "MONDO:3"


def test_a_pairs_file_names_the_line_that_is_not_utf8_and_drops_a_bom(tmp_path):
    from spacy_sapbert_training.data.pairs import PairFormatError

    lines = [f"C{i}||name {i}||synonym {i}\n".encode() for i in range(1, 3000)]
    lines[2400] = b"C2401||caf\xe9||cafe\n"  # Latin-1, deep enough to fall in a later read block
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"".join(lines))
    with pytest.raises(PairFormatError, match=r"bad\.txt:2401: is not valid UTF-8"):
        read_pairs(bad)
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffC1||a||b\r\nC2||c||d\n".encode("utf-8"))
    assert read_pairs(bom) == [("C1", "a", "b"), ("C2", "c", "d")]
