"""Answers in the scheme annotated text expects: a concept outside it answers as the nearest
broader concepts inside it (kb.schemes), itself next."""
from spacy_sapbert.candidates import CandidateGenerator
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.kb.schemes import scheme_answers


def test_a_concept_outside_the_scheme_answers_as_its_nearest_broader_concepts_inside_it():
    kb = KnowledgeBase()
    kb.add(Concept("D009369", "Neoplasms", types=["C04"]))
    kb.add(Concept("D001943", "Breast Neoplasms", types=["C04"], alt_ids=["MESH:D001943"]))
    kb.add(Concept("MONDO:0004992", "cancer", alt_ids=["C0006826"], broader=["D009369"]))  # a UMLS CUI is no MeSH id
    kb.add(Concept("MONDO:1", "lobular breast cancer", broader=["MONDO:2"]))                # two levels up
    kb.add(Concept("MONDO:2", "breast carcinoma", broader=["MESH:D001943"]))               # an alternative id resolves
    kb.add(Concept("MONDO:3", "Wolfram syndrome", alt_ids=["OMIM:222300"], broader=["D009369"]))  # OMIM: in MEDIC's scheme
    kb.add(Concept("MONDO:4", "orphan disorder"))                                          # nothing above it
    # Each parent is followed on its own: a near heading on one side does not hide a further one.
    kb.add(Concept("D030342", "Genetic Diseases, Inborn", types=["C16"]))
    kb.add(Concept("D020325", "Migraine with Aura", types=["C10"]))
    kb.add(Concept("MONDO:5", "hemiplegic migraine", broader=["D020325"]))
    kb.add(Concept("MONDO:6", "familial hemiplegic migraine", broader=["D030342", "MONDO:5"]))
    answers = scheme_answers(kb)
    assert answers == {"MONDO:0004992": ["D009369"], "MONDO:1": ["D001943"], "MONDO:2": ["D001943"],
                       "MONDO:5": ["D020325"], "MONDO:6": ["D030342", "D020325"]}
    assert scheme_answers(kb, max_depth=1)["MONDO:6"] == ["D030342"]  # the other side is two levels up
    kb.add(Concept("MONDO:7", "familial hemiplegic migraine 2", broader=["MONDO:5", "D030342"]))
    assert scheme_answers(kb)["MONDO:7"] == ["D030342", "D020325"]  # the nearer first
    # A concept bearing the name of one concept in the scheme (its twin) answers as it first, and
    # counts as in the scheme through it when above another; a name two of them bear makes no twin.
    kb.add(Concept("D006258", "Head and Neck Neoplasms", aliases=["Head and Neck Neoplasm"], types=["C04"]))
    kb.add(Concept("MONDO:8", "head and neck neoplasm", broader=["MONDO:0004992"]))
    kb.add(Concept("MONDO:9", "head and neck cancer", broader=["MONDO:0004992", "MONDO:8"]))
    kb.add(Concept("D000001", "Tumour", types=["C04"]))
    kb.add(Concept("D000002", "Tumours", aliases=["tumour"], types=["C04"]))
    kb.add(Concept("MONDO:10", "tumour", broader=["D009369"]))
    answers = scheme_answers(kb)
    assert answers["MONDO:8"] == ["D006258", "D009369"] and answers["MONDO:9"] == ["D006258", "D009369"]
    assert answers["MONDO:10"] == ["D009369"]
    # Where no concept in the scheme bears its canonical name, its other names may make the twin.
    kb.add(Concept("D003123", "Colorectal Neoplasms, Hereditary Nonpolyposis",
                   aliases=["HNPCC", "Lynch Syndrome"], types=["C04"]))
    kb.add(Concept("MONDO:11", "hereditary nonpolyposis colon cancer", aliases=["Lynch syndrome", "tumour"],
                   broader=["D009369"]))
    kb.add(Concept("MONDO:12", "Lynch-like syndrome", aliases=["Lynch syndrome"], broader=["D009369"]))
    assert scheme_answers(kb)["MONDO:11"] == ["D009369"]  # its names bear three concepts: no twin
    assert scheme_answers(kb)["MONDO:12"] == ["D003123", "D009369"]
    # A short form makes no twin: "COAD" is colon adenocarcinoma's and, in MeSH, COPD's.
    kb.add(Concept("D029424", "Pulmonary Disease, Chronic Obstructive", aliases=["COAD"], types=["C08"]))
    kb.add(Concept("MONDO:13", "colon adenocarcinoma", aliases=["COAD", "HNPCC"], broader=["D009369"]))
    assert scheme_answers(kb)["MONDO:13"] == ["D009369"]


def test_a_concept_answers_last_as_the_one_concept_in_the_scheme_its_name_ends_with():
    kb = KnowledgeBase()
    kb.add(Concept("D013927", "Thrombosis", types=["C14"]))
    kb.add(Concept("D013921", "Thrombocytopenia", types=["C15"]))
    kb.add(Concept("MONDO:1", "thrombotic disease", broader=["D013927"]))
    kb.add(Concept("MONDO:2", "heparin-induced thrombocytopenia", aliases=["HIT"], broader=["MONDO:1"]))
    # MONDO files it under thrombotic disease alone; its name's head is Thrombocytopenia
    assert scheme_answers(kb)["MONDO:2"] == ["D013927", "D013921"]
    # a concept with no heading above it answers as its head alone
    kb.add(Concept("MONDO:3", "immune thrombocytopenia"))
    assert scheme_answers(kb)["MONDO:3"] == ["D013921"]
    # no head that lies above a heading already found (through an alternative id too)
    kb.add(Concept("D008881", "Migraine Disorders", aliases=["migraine"], alt_ids=["MESH:D008881"], types=["C10"]))
    kb.add(Concept("D020325", "Migraine with Aura", types=["C10"], broader=["MESH:D008881"]))
    kb.add(Concept("MONDO:4", "familial hemiplegic migraine", broader=["D020325"]))
    assert scheme_answers(kb)["MONDO:4"] == ["D020325"]
    # the longest ending decides: borne by two concepts, or a short form, it gives no head
    kb.add(Concept("D000001", "Purpura", aliases=["thrombocytopenic purpura"], types=["C15"]))
    kb.add(Concept("D000002", "Purpura, Thrombocytopenic", aliases=["thrombocytopenic purpura"], types=["C15"]))
    kb.add(Concept("MONDO:5", "acquired thrombocytopenic purpura"))
    kb.add(Concept("D000003", "Diabetes Mellitus", aliases=["DM"], types=["C18"]))
    kb.add(Concept("MONDO:6", "type 2 DM"))
    answers = scheme_answers(kb)
    assert "MONDO:5" not in answers and "MONDO:6" not in answers


class _Index:
    concept_ids = ["D009369", "MONDO:0004992", "D001943"]
    types = {0: "C04", 1: "MONDO", 2: "C04"}

    def has_type(self, position, prefixes):
        return self.types[position].startswith(tuple(prefixes))

    def position_of(self, concept_id):
        return self.concept_ids.index(concept_id)


def test_the_generator_puts_the_answer_before_the_concept_at_its_score():
    generator = CandidateGenerator(None, _Index(), answers={"MONDO:0004992": ["D009369", "D001943"]})
    ranked = generator._in_scheme(("cancer", ()), [("MONDO:0004992", 0.9), ("D009369", 0.8), ("D001943", 0.7)])
    # the first heading, the concept itself, then its other headings, each once
    assert ranked == [("D009369", 0.9), ("MONDO:0004992", 0.9), ("D001943", 0.9)]
    # the headings in the order of the mention's own scores for them, the KB's order where it has none
    ranked = generator._in_scheme(("cancer", ()), [("MONDO:0004992", 0.9), ("D001943", 0.8), ("D009369", 0.7)])
    assert ranked == [("D001943", 0.9), ("MONDO:0004992", 0.9), ("D009369", 0.9)]
    assert generator._in_scheme(("cancer", ()), [("MONDO:0004992", 0.9)])[0] == ("D009369", 0.9)
    assert generator._in_scheme(("cancer", ()), [("MONDO:0004992", 0.9), ("D001943", 0.5)])[0] == ("D001943", 0.9)
    # an answer of a type the mention may not take is not given
    assert generator._in_scheme(("cancer", ("MONDO",)), [("MONDO:0004992", 0.9)]) == [("MONDO:0004992", 0.9)]
