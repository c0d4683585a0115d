"""Element symbols are read as the elements' names (pipe/elements.py), case and all."""
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.pipe.elements import ELEMENTS, element_name
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
