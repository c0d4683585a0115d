"""Tokenizer rules for biomedical text, added to spaCy's English tokenizer (and scispaCy's leaves
the same cases unsplit), so that a chemical can be a token of its own:

- a ")" right before a hyphen: "nitroglycerin (NTG)-induced" gives "(", "NTG", ")", "-induced",
  so that an entity can end at "NTG" and the abbreviation detector finds its "(short form)";
- a charge after a letter: "Na+", "Ca+2", and what follows it: "Na+/K+ ATPase", "Na+-K+";
- a square bracket inside a word: "[Na]o", "[Ca]i";
- a parenthesis that closes a word's short tail: a receptor subtype or a charge, "GABA(A)",
  "5-HT(1B/1D)", "K(+)", "Mg(2+)"; a longer one stays ("poly(ADP-ribose)");
- a suspended hyphen at a word's end: "diazepam- and cocaine-induced";
- the hyphen after a sign of optical rotation: "(+/-)-amphetamine", "(-)-PG-9".

BC5CDR's train split has 84 chemical mentions (of 5,203) that spaCy's English tokenizer with the
first rule alone cannot give as tokens; with all of them, 17. No train mention of BC5CDR or
NCBI-disease that was a run of tokens stops being one, and the abbreviation detector finds the
same 1,144 definitions in their train documents. Splitting every bracket instead loses long
forms with brackets inside ("Na(+)/H(+) exchanger").
"""
from typing import Callable

from spacy.language import Language
from spacy.util import compile_infix_regex, compile_suffix_regex, registry

CLOSE_BEFORE_HYPHEN = r"\)(?=-)"
INFIXES = (
    CLOSE_BEFORE_HYPHEN,
    r"(?<=[A-Za-z])\+",
    r"[\[\]]",
    r"(?<=[A-Za-z0-9])\((?=[A-Za-z0-9+/]{1,6}$)",
    r"(?<=[A-Za-z]\+)[-/]",
    r"(?<=[+\-±]\))-",
)
SUFFIXES = (r"(?<=[a-z]{3})-$",)


def _with_rules(nlp: Language, infixes, suffixes=()) -> Language:
    """`nlp` with `infixes` and `suffixes` added to its tokenizer's (kept when the pipeline is
    saved), each rule once however often this is called."""
    tokenizer = nlp.tokenizer
    for attribute, rules, compile_rules, method in (("infix_finditer", infixes, compile_infix_regex, "finditer"),
                                                    ("suffix_search", suffixes, compile_suffix_regex, "search")):
        current = getattr(tokenizer, attribute)
        patterns = [current.__self__.pattern] if current is not None else []
        missing = [rule for rule in rules if not any(rule in pattern for pattern in patterns)]
        if missing:
            setattr(tokenizer, attribute, getattr(compile_rules(patterns + missing), method))
    return nlp


def biomedical_tokens(nlp: Language) -> Language:
    """Add the rules to `nlp`'s tokenizer."""
    return _with_rules(nlp, INFIXES, SUFFIXES)


def split_close_before_hyphen(nlp: Language) -> Language:
    """The first rule alone, as pipelines saved before the others had it."""
    return _with_rules(nlp, (CLOSE_BEFORE_HYPHEN,))


@registry.callbacks("spacy-sapbert.biomedical_tokens.v1")
def make_biomedical_tokens() -> Callable[[Language], Language]:
    """The rules as an `[initialize.before_init]` callback, so a trained pipeline keeps them."""
    return biomedical_tokens


@registry.callbacks("spacy-sapbert.split_close_before_hyphen.v1")
def make_split_close_before_hyphen() -> Callable[[Language], Language]:
    """The first rule as a callback, for the configs of pipelines trained before the others."""
    return split_close_before_hyphen
