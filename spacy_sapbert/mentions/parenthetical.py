"""Another name the text gives in parentheses: in "amrubicin (SM-5887)" the development code names
the drug before it, and in "WR-2721 (amifostine)" the drug names the code. The code is often in
no dictionary, so its own ranking is poor; the name beside it usually is. The pipe (for the
labels of `parenthetical_labels`) and the harness (for chemicals) both call
`share_parentheticals`, which asks `parenthetical_sources` which mentions take another's ranking.

The rule, chosen on the BC5CDR-chemical train folds (docs/results.md): two mentions side by side,
the second alone in parentheses after a space, "A (B)"; the one whose best score is lower, and
every mention of the document written as it, take the other's ranking; but a short form in
parentheses gives nothing back to the text before it, which it abbreviates ("extract of Daucus
carota seeds (DCE)": DCE is linked as its long form, the abbreviation rules' part). Written
without the space, the parenthesis is notation rather than an aside ("K(Na)", a constant for
sodium; "N(G)-nitro"), and nothing is taken.
"""
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

# What lies between A and B, and what follows B.
_OPENS = re.compile(r"\s+\(\s*")
_CLOSES = re.compile(r"\s*\)")

# A mention of one document: its start and end offsets in the text, and its text.
Placed = Tuple[int, int, str]


def parenthetical_sources(text: str, mentions: Sequence[Placed], top: Sequence[Optional[float]],
                          is_short_form: Callable[[str], bool] = lambda text: False) -> Dict[int, int]:
    """For the mentions of one document (in any order) and each one's best score (None: the rule
    does not apply to it, e.g. another label, or nothing found), which mention takes which
    one's ranking: {index of a mention: index of the mention whose ranking it takes}. A text
    named beside another in parentheses twice takes its first pair's ranking; the surer of a
    pair keeps its own, and a tie changes nothing. `is_short_form`: whether a text is a short form
    (mentions.abbreviations.is_short_form), which in parentheses gives nothing back."""
    order = sorted((i for i, score in enumerate(top) if score is not None), key=lambda i: mentions[i][:2])
    defined: Dict[str, int] = {}  # the less sure one's text → the surer one
    for a, b in zip(order, order[1:]):
        (_, a_end, _), (b_start, b_end, _) = mentions[a], mentions[b]
        if _OPENS.fullmatch(text, a_end, b_start) and _CLOSES.match(text, b_end) and top[a] != top[b]:
            surer, taker = (a, b) if top[a] > top[b] else (b, a)
            if surer == b and is_short_form(mentions[b][2]):
                continue
            defined.setdefault(mentions[taker][2], surer)
    return {i: defined[mentions[i][2]] for i in order
            if mentions[i][2] in defined and i != defined[mentions[i][2]]}


Found = TypeVar("Found")


def share_parentheticals(text: str, mentions: Sequence[Placed], found: Sequence[Found],
                         top: Sequence[Optional[float]]) -> List[Found]:
    """`found` (what each mention was linked to: candidates, a ranking) after the parenthetical
    pairs of `text` share the surer one's (parenthetical_sources; `top`: each mention's best
    score, None where the rule does not apply), short forms read as the abbreviation rules read
    them (abbreviations.is_short_form). What the pipe and the harness both call."""
    from .abbreviations import is_short_form

    sources = parenthetical_sources(text, mentions, top, is_short_form)
    return [found[sources[i]] if i in sources else item for i, item in enumerate(found)]
