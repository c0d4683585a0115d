"""The tokenizer rules shared by the demo NER and the harness's abbreviation detection."""
import pytest
import spacy
from spacy.util import registry


def test_close_bracket_before_a_hyphen_is_split_by_the_registered_callback():
    split = registry.callbacks.get("spacy-sapbert.split_close_before_hyphen.v1")()
    nlp = split(split(spacy.blank("en")))  # twice: the rule is added once
    assert [t.text for t in nlp("nitroglycerin (NTG)-induced")] == ["nitroglycerin", "(", "NTG", ")", "-induced"]
    # Brackets elsewhere are left as spaCy's English tokenizer has them.
    assert [t.text for t in nlp("Na(+)/H(+) exchanger")] == [t.text for t in spacy.blank("en")("Na(+)/H(+) exchanger")]
    assert nlp.tokenizer.infix_finditer.__self__.pattern.count(r"\)(?=-)") == 1


@pytest.mark.parametrize("text, tokens", [
    ("Na+/K+ ATPase", ["Na", "+", "/", "K", "+", "ATPase"]),
    ("Na+-K+ pump", ["Na", "+", "-", "K", "+", "pump"]),
    ("(+/-)-amphetamine", ["(", "+", "/-", ")", "-", "amphetamine"]),
    ("Ca+2 levels", ["Ca", "+", "2", "levels"]),
    ("[Na]o fell", ["[", "Na", "]", "o", "fell"]),
    ("GABA(A) receptor", ["GABA", "(", "A", ")", "receptor"]),
    ("K(+) rose", ["K", "(", "+", ")", "rose"]),
    ("diazepam- and cocaine-induced", ["diazepam", "-", "and", "cocaine", "-", "induced"]),
    ("nitroglycerin (NTG)-induced", ["nitroglycerin", "(", "NTG", ")", "-induced"]),
    # a longer parenthesis inside a word stays
    ("poly(ADP-ribose) polymerase", ["poly(ADP", "-", "ribose", ")", "polymerase"]),
])
def test_the_biomedical_rules_give_chemicals_tokens_of_their_own(text, tokens):
    rules = registry.callbacks.get("spacy-sapbert.biomedical_tokens.v1")()
    nlp = rules(rules(spacy.blank("en")))  # twice: each rule is added once
    assert [t.text for t in nlp(text)] == tokens
    assert nlp.tokenizer.infix_finditer.__self__.pattern.count(r"(?<=[A-Za-z])\+") == 1


def test_the_bundled_ner_tokenizes_with_the_rules():
    from spacy_sapbert.pipe.bundled import DEMO_NER

    nlp = spacy.load(DEMO_NER)
    assert [t.text for t in nlp.make_doc("[Ca]o and GABA(A)")] == ["[", "Ca", "]", "o", "and", "GABA", "(", "A", ")"]
