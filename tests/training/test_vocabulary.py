"""Extra chemical names from cross-referenced sources (training.data.vocabulary)."""
import pytest

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert_training.data import vocabulary


def test_a_source_adds_names_no_concept_bears_and_only_to_concepts_it_holds(monkeypatch, caplog):
    kb = KnowledgeBase([Concept("C1", "amrubicin"), Concept("D2", "Doxorubicin", ["adriamycin"])])
    pairs = [("C1", "SM-5887"), ("C1", "sm 5887"),  # one name, two spellings: the first kept
             ("C1", "Adriamycin"),                   # borne by D2 already: MeSH's naming stays
             ("C9", "elsewhere"),                    # a concept the dictionary lacks
             ("D2", "&lt;ref name=&quot;x&quot;&gt;{{cite web")]  # scraped markup, not a name
    monkeypatch.setitem(vocabulary.SOURCES, "test", lambda kb: iter(pairs))
    with caplog.at_level("INFO"):
        out = vocabulary.add_source_names(kb, "test")
    assert out.cui_to_entity["C1"].aliases == ["SM-5887"] and out.cui_to_entity["D2"].aliases == ["adriamycin"]
    assert out.name == f"{kb.name}+test" and "1 names added to 1 concepts" in caplog.text


def test_an_unknown_source_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"^'pubchem' is no vocabulary source; use one of chebi, drugbank, drug-xrefs\.$"):
        vocabulary.add_source_names(KnowledgeBase([]), "pubchem")
