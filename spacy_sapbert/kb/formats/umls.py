"""UMLS: MRCONSO.RRF, with MRSTY.RRF for semantic types."""
from typing import Dict, List, Optional, Sequence

from ..concepts import Concept, KnowledgeBase, PathLike, clean_name
from .text import _error, _lines, _finish


_MRCONSO_FIELDS = 18


_MRSTY_FIELDS = 6


def _rrf_fields(line: str, n_fields: int) -> Optional[List[str]]:
    """The fields of an RRF row, each ended by '|'; None when the count differs (a '|' inside a
    field would shift the columns)."""
    cols = line.split("|")
    return cols[:-1] if len(cols) == n_fields + 1 and cols[-1] == "" else None


def read_umls(
    mrconso: PathLike,
    mrsty: Optional[PathLike] = None,
    languages: Sequence[str] = ("ENG",),
    sources: Optional[Sequence[str]] = None,
    include_suppressed: bool = False,
    name: str = "umls",
) -> KnowledgeBase:
    """Read UMLS `MRCONSO.RRF` (and `MRSTY.RRF` for semantic types as types).

    languages: LAT values to keep. sources: SAB values to keep (None keeps all).
    include_suppressed: keep atoms whose SUPPRESS flag is O, E or Y.
    """
    languages = set(languages)
    sources = set(sources) if sources is not None else None
    preferred: Dict[str, str] = {}
    names: Dict[str, List[str]] = {}
    expected = f"{_MRCONSO_FIELDS} '|'-separated MRCONSO fields, each ended by '|', with a CUI and a non-empty STR"
    for line_no, line in _lines(mrconso):
        cols = _rrf_fields(line, _MRCONSO_FIELDS)
        if cols is None or not cols[0].startswith("C") or not clean_name(cols[14]):
            raise _error(mrconso, line_no, expected, line)
        cui, lat, ts, stt, ispref, sab, text, suppress = (
            cols[0], cols[1], cols[2], cols[4], cols[6], cols[11], cols[14], cols[16],
        )
        if lat not in languages or (sources is not None and sab not in sources):
            continue
        if suppress != "N" and not include_suppressed:
            continue
        names.setdefault(cui, []).append(text)
        if ts == "P" and stt == "PF" and ispref == "Y":
            preferred.setdefault(cui, text)
    types: Dict[str, List[str]] = {}
    if mrsty is not None:
        for line_no, line in _lines(mrsty):
            cols = _rrf_fields(line, _MRSTY_FIELDS)
            if cols is None or not cols[0].startswith("C") or not cols[1].startswith("T"):
                raise _error(mrsty, line_no, f"{_MRSTY_FIELDS} '|'-separated MRSTY fields, each ended by '|'", line)
            types.setdefault(cols[0], []).append(cols[1])
    kb = KnowledgeBase(name=name)
    for cui, cui_names in names.items():
        canonical = preferred.get(cui, cui_names[0])
        kb.add(Concept(cui, canonical, aliases=cui_names, types=types.get(cui, [])))
    return _finish(kb, mrconso)
