"""Contextual mentions' data: ontology names found in text, in [Ms] … [Me] windows."""
import spacy

from spacy_sapbert.encoders.base import MENTION_END, MENTION_START, in_window, mention_of
from spacy_sapbert_training.data.contexts import context_nlp, context_pairs, contexts, name_matcher


def test_names_are_found_case_insensitively_longest_first_in_their_windows(tiny_kb):
    nlp = spacy.blank("en")
    matcher = name_matcher(nlp, tiny_kb)
    text = "Patients with Type 2 Diabetes took METFORMIN daily and then developed lactic acidosis."
    found = list(contexts(nlp, matcher, [text], window=6))
    assert ("D003924", "with [Ms] Type 2 Diabetes [Me] took METFORMIN") in found
    assert ("D008687", "Diabetes took [Ms] METFORMIN [Me] daily and then") in found
    assert all(MENTION_START in c and MENTION_END in c for _, c in found)
    # "type 2 diabetes" wins over any shorter name inside it.
    assert not any(c.startswith("Type 2 [Ms]") for _, c in found)
    pairs = context_pairs(found, tiny_kb, synonyms=2, seed=0)
    assert {p[0] for p in pairs} == {c for c, _ in found} and all(len(p) == 3 for p in pairs)
    assert pairs == context_pairs(found, tiny_kb, synonyms=2, seed=0)


def test_a_window_holds_the_mention_and_fills_from_both_sides():
    doc = spacy.blank("en")("a b c d e f g h i j")
    assert in_window(doc, 0, 1, window=4) == "[Ms] a [Me] b c d"
    assert in_window(doc, 9, 10, window=4) == "g h i [Ms] j [Me]"
    assert in_window(doc, 4, 6, window=6) == "c d [Ms] e f [Me] g h"


def test_a_window_stays_in_the_mentions_sentence_and_takes_the_text_as_linked():
    doc = context_nlp()("Aa bb cc. Dd ee ff gg hh. Ii jj.")
    # "ee" is token 5; its sentence is tokens 4-9 ("Dd ee ff gg hh .").
    assert in_window(doc, 5, 6, window=4) == "Dd [Ms] ee [Me] ff gg"
    assert in_window(doc, 5, 6, window=20) == "Dd [Ms] ee [Me] ff gg hh."
    window = in_window(doc, 5, 6, window=4, mention="eee expanded")
    assert window == "Dd [Ms] eee expanded [Me] ff gg" and mention_of(window) == "eee expanded"
    assert mention_of("no markers here") == "no markers here"
