"""Another name the text gives in parentheses: in "amrubicin (SM-5887)" the development code names
the drug before it. The code is often in no dictionary, so its own ranking is poor; the name
before it usually is. The pipe (for the labels of `parenthetical_labels`) and the harness (for
chemicals) both ask `parenthetical_sources` which mentions take another's ranking.

The rule, chosen on the BC5CDR-chemical train folds (docs/results.md): two mentions side by side,
the second alone in parentheses after a space, "A (B)"; when A's best score is higher than B's,
B and every mention of the document written as B take A's ranking. Written without the space,
the parenthesis is notation rather than an aside ("K(Na)", a constant for sodium; "N(G)-nitro"),
and nothing is taken.
"""
import re
from typing import Dict, Optional, Sequence, Tuple

# What lies between A and B, and what follows B.
_OPENS = re.compile(r"\s+\(\s*")
_CLOSES = re.compile(r"\s*\)")

# A mention of one document: its start and end offsets in the text, and its text.
Placed = Tuple[int, int, str]


def parenthetical_sources(text: str, mentions: Sequence[Placed], top: Sequence[Optional[float]]) -> Dict[int, int]:
    """For the mentions of one document (in any order) and each one's best score (None: the rule
    does not apply to it, e.g. another label, or nothing found), which mention takes which
    one's ranking: {index of a mention: index of the mention whose ranking it takes}. A text
    named in parentheses twice takes its first definition's ranking; A keeps its own."""
    order = sorted((i for i, score in enumerate(top) if score is not None), key=lambda i: mentions[i][:2])
    defined: Dict[str, int] = {}  # B's text → A
    for a, b in zip(order, order[1:]):
        (_, a_end, _), (b_start, b_end, b_text) = mentions[a], mentions[b]
        if (b_text not in defined and _OPENS.fullmatch(text, a_end, b_start)
                and _CLOSES.match(text, b_end) and top[a] > top[b]):
            defined[b_text] = a
    return {i: defined[mentions[i][2]] for i in order
            if mentions[i][2] in defined and i != defined[mentions[i][2]]}
