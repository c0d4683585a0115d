"""One tokenizer rule for biomedical text: a ")" right before a hyphen is a token of its own.

spaCy's English tokenizer (and scispaCy's) leaves "nitroglycerin (NTG)-induced" as "(",
"NTG)-induced": no entity can end at "NTG", and scispaCy's AbbreviationDetector finds no
"(short form)". BC5CDR, a corpus of chemical-induced diseases, writes 17 of its dev definitions
so (NTG, CYP, AAP, EMB, METH, …); the rule loses 2, receptors with ")-" inside their long
form ("Na(+)-Cl(-) cotransporter"). Splitting every bracket instead found 3 more but lost 6 long
forms with brackets inside ("Na(+)/H(+) exchanger").
"""
from typing import Callable

from spacy.language import Language
from spacy.util import compile_infix_regex, registry

CLOSE_BEFORE_HYPHEN = r"\)(?=-)"


def split_close_before_hyphen(nlp: Language) -> Language:
    """Add the rule to the infixes of `nlp`'s tokenizer (kept when the pipeline is saved)."""
    infixes = nlp.tokenizer.infix_finditer
    current = [infixes.__self__.pattern] if infixes is not None else []
    if not any(CLOSE_BEFORE_HYPHEN in pattern for pattern in current):  # once is enough
        nlp.tokenizer.infix_finditer = compile_infix_regex(current + [CLOSE_BEFORE_HYPHEN]).finditer
    return nlp


@registry.callbacks("spacy-sapbert.split_close_before_hyphen.v1")
def make_split_close_before_hyphen() -> Callable[[Language], Language]:
    """The rule as an `[initialize.before_init]` callback, so a trained pipeline keeps it."""
    return split_close_before_hyphen
