"""The tokenizer rule shared by the demo NER and the harness's abbreviation detection."""
import spacy
from spacy.util import registry


def test_close_bracket_before_a_hyphen_is_split_by_the_registered_callback():
    split = registry.callbacks.get("spacy-sapbert.split_close_before_hyphen.v1")()
    nlp = split(split(spacy.blank("en")))  # twice: the rule is added once
    assert [t.text for t in nlp("nitroglycerin (NTG)-induced")] == ["nitroglycerin", "(", "NTG", ")", "-induced"]
    # Brackets elsewhere are left as spaCy's English tokenizer has them.
    assert [t.text for t in nlp("Na(+)/H(+) exchanger")] == [t.text for t in spacy.blank("en")("Na(+)/H(+) exchanger")]
    assert nlp.tokenizer.infix_finditer.__self__.pattern.count(r"\)(?=-)") == 1
