"""Element symbols and molecular formulas are read as the names of what they write (mentions/elements.py,
mentions/formulas.py), case and all."""
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.mentions.elements import ELEMENTS, element_name
from spacy_sapbert.search.index import ConceptIndex

from conftest import ruler_nlp


def test_the_table_holds_every_element_once_by_its_symbol():
    assert len(ELEMENTS) == 118 and len(set(ELEMENTS.values())) == 118
    assert element_name("Na") == "sodium" and element_name("Al") == "aluminum" and element_name("W") == "tungsten"
    assert element_name("NA") is None and element_name("na") is None and element_name("Sodium") is None


def test_the_pipe_links_a_symbol_as_its_element(tiny_model, tiny_encoder, tmp_path):
    kb = KnowledgeBase([Concept("D008094", "Lithium", ["lithium, elemental"], ["D01.268.556.579"]),
                        Concept("D008012", "Lidocaine", ["lignocaine"], ["D02.065.277"])])
    index_dir = ConceptIndex.build(kb, tiny_encoder).save(tmp_path / "index")
    nlp = ruler_nlp([("Chemical", "Li")])
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model), "precision": "fp32"},
                                           "index": {"index": str(index_dir)}, "threshold": 0.0,
                                           "label_types": {}}).initialize()
    (ent,) = nlp("Serum Li rose.").ents
    assert (ent._.cui, ent._.cui_score) == ("D008094", 1.0)


def test_a_formula_is_read_by_what_it_holds_in_any_order():
    from spacy_sapbert.mentions.formulas import composition, formula_name, hill

    assert hill(composition("Ca(OH)2")) == "CaH2O2" and hill(composition("CH3COOH")) == "C2H4O2"
    assert [formula_name(t) for t in ("NaCl", "ClNa", "H2O", "CCl4", "NH4Cl")] == [
        "sodium chloride", "sodium chloride", "water", "carbon tetrachloride", "ammonium chloride"]
    # short forms of capitals, symbols, formulas of isomers and what is no formula: none
    assert [formula_name(t) for t in ("OC", "CO", "SNP", "Na", "C2H5OH", "CsA", "FK506", "Ca(2+)", "(")] == [None] * 9


def test_a_formula_is_linked_as_its_compound_when_the_dictionary_holds_the_name():
    from spacy_sapbert.mentions.abbreviations import linked_text

    is_name = {"sodium chloride", "water"}.__contains__
    assert linked_text("NaCl", {}, lambda t: is_name(t.lower())) == "sodium chloride"
    assert linked_text("KCl", {}, lambda t: is_name(t.lower())) == "KCl"  # no potassium chloride here
    assert linked_text("NaCl", {"NaCl": "N-acetylcysteine lysinate"}, lambda t: True) == "N-acetylcysteine lysinate"
