"""JSONL (ours and scispaCy's), and the names table (a name and a concept id a line)."""
import json
import logging
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..concepts import SCISPACY_KEYS, Concept, KnowledgeBase, PathLike, clean_name
from .text import _error, _is_text, _is_text_list, open_text, _lines, _finish, _tsv_rows

logger = logging.getLogger(__name__)


JSONL_KEYS = SCISPACY_KEYS + ("alt_ids", "xrefs", "broader")
# What every line of a KB JSONL must at least be (read_jsonl, read_canonical_names).
_RECORD = 'a JSON object with string "concept_id" and "canonical_name"'


def read_jsonl(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read scispaCy's KB JSONL (or .jsonl.gz): one object per line with `concept_id`,
    `canonical_name`, optional `aliases`, `types`, `definition` (and our `alt_ids`, `xrefs`,
    `broader`). Any other key is refused, so that no field is silently ignored."""
    kb = KnowledgeBase(name=name or Path(path).name.removesuffix(".gz").removesuffix(".jsonl"))
    list_keys = ("aliases", "types", "alt_ids", "xrefs", "broader")
    expected = _RECORD
    first_line: Dict[str, int] = {}
    repeated: List[Tuple[int, str, int]] = []  # (line, concept_id, the line that gave it first)
    for line_no, line in _lines(path):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            # the text ends before the JSON does: a file cut short, or a record broken over lines
            cut = err.pos >= len(line.rstrip()) or err.msg.startswith("Unterminated string")
            raise _error(path, line_no, expected + (" on one whole line (this one is cut short)" if cut else ""),
                         line) from None
        except (ValueError, RecursionError):  # nested too deeply to read
            raise _error(path, line_no, expected, line) from None
        if not isinstance(data, dict) or not _is_text(data.get("concept_id")) or not data["concept_id"].strip():
            raise _error(path, line_no, expected, line)
        unknown = [key for key in data if key not in JSONL_KEYS]
        if unknown:
            keys = ", ".join(f'"{key}"' for key in JSONL_KEYS)
            raise _error(
                path, line_no, f'only the keys {keys} (not "{unknown[0]}"; synonyms go in "aliases")', line
            )
        if not _is_text(data.get("canonical_name")):
            raise _error(path, line_no, expected, line)
        for key in list_keys:
            if not _is_text_list(data.get(key, [])):
                raise _error(path, line_no, f'"{key}" to be a list of strings', line)
        if data.get("definition") is not None and not _is_text(data["definition"]):
            raise _error(path, line_no, '"definition" to be a string or null', line)
        if not clean_name(data["canonical_name"]) or not _is_text_list(data.get("aliases", []), non_empty=True):
            raise _error(path, line_no, 'non-empty names in "canonical_name" and "aliases"', line)
        if data["concept_id"] in first_line:
            repeated.append((line_no, data["concept_id"], first_line[data["concept_id"]]))
        first_line.setdefault(data["concept_id"], line_no)
        kb.add(
            Concept(
                concept_id=data["concept_id"],
                canonical_name=data["canonical_name"],
                definition=data.get("definition"),
                **{key: data.get(key, []) for key in list_keys},
            )
        )
    if repeated:  # one warning for the file, however many lines repeat an id
        shown = "; ".join(f"line {line_no}: {cui!r}, given on line {first}" for line_no, cui, first in repeated[:3])
        more = f"; and {len(repeated) - 3} more" if len(repeated) > 3 else ""
        logger.warning("%s: %d line%s repeat%s a concept_id given before (%s%s); their names are merged into that "
                       "concept (give distinct ids to keep them apart).", path, len(repeated),
                       "s" if len(repeated) > 1 else "", "" if len(repeated) > 1 else "s", shown, more)
    return _finish(kb, path)


def read_canonical_names(path: PathLike) -> Dict[str, str]:
    """Each concept's canonical name in a KB JSONL (or .jsonl.gz), by id, in file order, without
    the rest of each line (read_jsonl reads and checks it all: for the bundled KB 0.2 s and a few
    MB against 1 s and 50 MB). A repeated id keeps its first line's name, as read_jsonl does."""
    expected = _RECORD
    names: Dict[str, str] = {}
    for line_no, line in _lines(path):
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise _error(path, line_no, expected, line) from None
        if not isinstance(data, dict) or not _is_text(data.get("concept_id")) or not _is_text(data.get("canonical_name")):
            raise _error(path, line_no, expected, line)
        names.setdefault(data["concept_id"], data["canonical_name"])
    return names


def write_jsonl(kb: KnowledgeBase, path: PathLike, scispacy: bool = False) -> Path:
    """Write a knowledge base as JSONL (gzip-compressed if the name ends in .gz); return the
    path. `scispacy=True` writes exactly scispaCy's keys, for its `KnowledgeBase`; else our
    extra ids are kept too."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_text(path, "w") as handle:
        for concept in kb:
            handle.write(json.dumps(concept.to_dict(scispacy=scispacy), ensure_ascii=False) + "\n")
    return path


def read_names(path: PathLike) -> List[Tuple[int, str, str, Optional[str]]]:
    """A names table: per line a name and the id of the concept it names, tab-separated
    ("TAC<tab>D016559"; UTF-8, gzip if the name ends in .gz); an id the index no longer holds may
    be followed by the index's id for it, in a third column ("gemcitabine<tab>C056507<tab>
    D000093542": MeSH made the supplementary concept a descriptor). Blank lines and lines
    starting with "#" are skipped. Returns (line number, name, concept id, current id or None)
    in file order."""
    rows = []
    for line_no, row, line in _tsv_rows(path):
        if line.lstrip().startswith("#"):
            continue
        if len(row) not in (2, 3) or not clean_name(row[0]) or not all(field.strip() for field in row[1:]):
            raise _error(path, line_no, "a name and a concept id separated by one tab (and, for an id the index no "
                         "longer holds, its current id after another)", line)
        if not any(c.isalnum() for c in row[0]):
            raise _error(path, line_no, "a name with a letter or digit", line)
        rows.append((line_no, clean_name(row[0]), row[1].strip(), row[2].strip() if len(row) == 3 else None))
    return rows
