"""Molecular formulas, read as the names of their compounds: "NaCl" is sodium chloride, "H2O"
water, "CCl4" carbon tetrachloride.

A formula is matched by what it holds, whatever the order it is written in ("NaCl" and Hill's
"ClNa" alike), against the formulas of compounds with at most one carbon atom (a formula of two
carbons or more names isomers) that name one compound in the `chemicals` package's database
(assets/formulas.tsv.gz, written by scripts/make_formulas.py). Only a text with a digit or a
two-letter symbol is read as a formula, so that a short form of capitals ("OC", "CY", "SNP")
never is, and one of two atoms or more, so that a symbol is left to mentions.elements."""
import gzip
import re
from collections import Counter
from functools import lru_cache
from typing import Dict, Optional

from ..assets import ASSETS
from .elements import ELEMENTS

FORMULAS_FILE = ASSETS / "formulas.tsv.gz"
_SYMBOL = "|".join(sorted(ELEMENTS, key=len, reverse=True))
_PART = re.compile(rf"({_SYMBOL})(\d*)|\(|\)(\d*)")


@lru_cache(maxsize=1)
def _formulas() -> Dict[str, str]:
    with gzip.open(FORMULAS_FILE, "rt", encoding="utf-8") as rows:
        return dict(line.rstrip("\n").split("\t") for line in rows)


def composition(text: str) -> Optional[Counter]:
    """The atoms a formula as written holds ("Ca(OH)2": Ca 1, O 2, H 2), or None if `text` is
    no formula."""
    stack = [Counter()]
    position = 0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None:
            return None
        symbol, count, close_count = part.groups()
        if symbol:
            stack[-1][symbol] += int(count or 1)
        elif part.group(0) == "(":
            stack.append(Counter())
        else:
            if len(stack) == 1:
                return None
            group = stack.pop()
            for atom, n in group.items():
                stack[-1][atom] += n * int(close_count or 1)
        position = part.end()
    return stack[0] if len(stack) == 1 and stack[0] else None


def hill(atoms: Counter) -> str:
    """The Hill formula: carbon, then hydrogen, then the rest alphabetically (without carbon,
    all alphabetically)."""
    order = (["C", "H"] + sorted(a for a in atoms if a not in ("C", "H"))) if "C" in atoms else sorted(atoms)
    return "".join(f"{a}{atoms[a] if atoms[a] > 1 else ''}" for a in order if a in atoms)


def formula_name(text: str) -> Optional[str]:
    """The name of the compound whose formula `text` is, or None."""
    if not re.search(r"\d|[a-z]", text) or len(text) > 30:
        return None
    atoms = composition(text)
    if atoms is None or sum(atoms.values()) < 2:
        return None
    return _formulas().get(hill(atoms))
