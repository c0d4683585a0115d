"""BioSyn's dictionaries (`cui||name`) and CTD's MEDIC disease vocabulary."""
from pathlib import Path
from typing import Optional

from ..concepts import Concept, KnowledgeBase, PathLike, clean_name
from .text import _error, _lines, _finish, _split_ids, _version_in


def read_biosyn(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read a SapBERT/BioSyn dictionary: `id[|alt_id…]||name`, one name per line. Ids are kept
    exactly as written; a name may not hold '|' ('name|synonym|…' is the medic format)."""
    kb = KnowledgeBase(name=name or Path(path).stem)
    for line_no, line in _lines(path):
        if "||" not in line:
            raise _error(path, line_no, "'id||name'", line)
        raw_ids, concept_name = line.split("||", 1)
        ids = _split_ids(raw_ids, path, line_no, line, normalise=False)
        if "|" in concept_name:
            raise _error(
                path, line_no, "'id||name' with no '|' in the name (for 'name|synonym|…' use the medic format)", line
            )
        if not clean_name(concept_name):
            raise _error(path, line_no, "'id||name' with a non-empty name", line)
        kb.add(Concept(ids[0], concept_name, alt_ids=ids[1:]))
    return _finish(kb, path)


def read_medic(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read the MEDIC disease vocabulary: `ID[|altID…]||name|synonym|…`, one concept per line.
    Bare numeric ids are OMIM ids and become "OMIM:n" (as in the corpora); "MESH:" is dropped."""
    kb = KnowledgeBase(name=name or Path(path).stem, version=_version_in(Path(path).stem))
    expected = "'ID[|altID…]||name|synonym|…'"
    for line_no, line in _lines(path):
        if "||" not in line:
            raise _error(path, line_no, expected, line)
        raw_ids, raw_names = line.split("||", 1)
        ids = _split_ids(raw_ids, path, line_no, line, normalise=True)
        names = raw_names.split("|")
        if any(not clean_name(n) for n in names):
            raise _error(path, line_no, f"{expected} with no empty name", line)
        kb.add(Concept(ids[0], names[0], aliases=names[1:], alt_ids=ids[1:], types=["MEDIC"]))
    return _finish(kb, path)
