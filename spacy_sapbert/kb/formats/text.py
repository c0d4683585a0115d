"""Reading a knowledge-base file as text: lines with their numbers (gzip and UTF-8 checked), TSV
rows, JSON, ids, and the one-sentence errors every reader raises."""
import codecs
import gzip
import io
import json
import logging
import re
import zlib
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from ..concepts import KBFormatError, KnowledgeBase, PathLike, clean_name

logger = logging.getLogger(__name__)


def _shown(found: object) -> str:
    """A value as an error message shows it: repr for a line, compact JSON for a JSON value,
    cut to 80 characters."""
    if isinstance(found, str):
        text = repr(found)
    else:
        try:
            text = json.dumps(found, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = repr(found)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(path: PathLike, line_no: int, expected: str, line: str) -> KBFormatError:
    shown = line if len(line) <= 80 else line[:77] + "..."
    return KBFormatError(
        f"{path}:{line_no}: expected {expected}, but found {shown!r}; fix or remove that line."
    )


def _entry_error(where: str, expected: str, found: object) -> KBFormatError:
    """An error in a JSON document, which has no line to name: `where` is the file and the entry."""
    return KBFormatError(f"{where}: expected {expected}, but found {_shown(found)}; fix or remove that entry.")


def _is_text(value: object) -> bool:
    """Whether `value` is a string that can be written as UTF-8 (JSON may spell lone surrogates)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_text_list(value: object, non_empty: bool = False) -> bool:
    return isinstance(value, list) and all(
        _is_text(v) and (not non_empty or clean_name(v)) for v in value
    )


def open_text(path: Path, mode: str = "r", encoding: str = "utf-8"):
    """Open a text file, gzip-compressed when its name ends in .gz (written without a
    timestamp, so the same KB always gives the same bytes)."""
    if path.suffix != ".gz":
        return path.open(mode, encoding=encoding, errors="strict")
    binary = gzip.GzipFile(path, "wb", mtime=0) if mode == "w" else gzip.GzipFile(path, "rb")
    return io.TextIOWrapper(binary, encoding=encoding, errors="strict")


def _existing(path: PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Knowledge-base file {path} does not exist; check the path.")
    if path.is_dir():
        raise KBFormatError(f"{path}: is a folder, not a knowledge-base file; pass the file itself.")
    return path


def _not_gzip(path: Path, err: Exception) -> KBFormatError:
    return KBFormatError(f"{path}: cannot be decompressed as gzip ({err}); copy it again or drop the .gz.")


def _not_utf8(path: Path, line_no: int, err: UnicodeDecodeError) -> KBFormatError:
    return KBFormatError(
        f"{path}:{line_no}: is not valid UTF-8 ({err.reason}); re-encode the file as UTF-8."
    )


def _lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    """The non-blank lines of a UTF-8 file (gzip-compressed if its name ends in .gz) with their
    numbers, without a byte-order mark or line ending (LF or CRLF)."""
    path = _existing(path)
    compressed = path.suffix == ".gz"
    with (gzip.open(path, "rb") if compressed else path.open("rb")) as handle:
        line_no = 0
        while True:
            try:
                raw = handle.readline()
            except (OSError, EOFError, zlib.error) as err:  # not gzip data, or cut short
                if not compressed:
                    raise
                raise _not_gzip(path, err) from None
            if not raw:
                return
            line_no += 1
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise _not_utf8(path, line_no, err) from None
            if line.strip():
                yield line_no, line


def _read_json(path: PathLike, expected: str) -> object:
    """A whole JSON document (gzip-compressed if its name ends in .gz), BOM allowed."""
    path = _existing(path)
    compressed = path.suffix == ".gz"
    try:
        with (gzip.open(path, "rb") if compressed else path.open("rb")) as handle:
            raw = handle.read()
    except (OSError, EOFError, zlib.error) as err:
        if not compressed:
            raise
        raise _not_gzip(path, err) from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, raw.count(b"\n", 0, err.start) + 1, err) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise KBFormatError(
            f"{path}:{err.lineno}: expected {expected}, but the JSON is malformed ({err.msg}); "
            "check that the file is complete."
        ) from None
    except RecursionError:
        raise KBFormatError(
            f"{path}: expected {expected}, but the JSON is nested too deeply to read; check the file's format."
        ) from None
    except ValueError as err:  # e.g. an integer with more digits than Python converts
        raise KBFormatError(
            f"{path}: expected {expected}, but the JSON cannot be read ({err}); check the file's format."
        ) from None


def _finish(kb: KnowledgeBase, path: PathLike) -> KnowledgeBase:
    if kb.n_empty_names:
        logger.info("%s: skipped %d empty names.", path, kb.n_empty_names)
    logger.info("%s: loaded %d concepts, %d names.", path, len(kb), kb.n_names)
    return kb


def _version_in(stem: str) -> str:
    match = re.search(r"\d{4}[-_]?\d{2}[-_]?\d{2}|\d{2}[A-Za-z]{3}\d{4}|\d+(\.\d+)+", stem)
    return match.group(0) if match else ""


def _split_tsv(line: str) -> Optional[List[str]]:
    """A line split on tabs. A field that starts with '"' is quoted as the csv module writes
    it (it may hold tabs; '""' is one '"') and must close on the same line: None when it does
    not, or when its closing quote is not followed by a tab or the line's end."""
    fields: List[str] = []
    start, end = 0, len(line)
    while True:
        if line.startswith('"', start):
            parts, pos = [], start + 1
            while True:
                close = line.find('"', pos)
                if close < 0:
                    return None
                parts.append(line[pos:close])
                if line.startswith('"', close + 1):
                    parts.append('"')
                    pos = close + 2
                    continue
                break
            fields.append("".join(parts))
            if close + 1 == end:
                return fields
            if line[close + 1] != "\t":
                return None
            start = close + 2
        else:
            tab = line.find("\t", start)
            if tab < 0:
                fields.append(line[start:])
                return fields
            fields.append(line[start:tab])
            start = tab + 1


def _tsv_rows(path: PathLike) -> Iterator[Tuple[int, List[str], str]]:
    """Rows of a tab-separated file, one per line (a quoted field may hold tabs but never a
    line break), with their line numbers."""
    for line_no, line in _lines(path):
        row = _split_tsv(line)
        if row is None:
            expected = "a field starting with '\"' to end in '\"' before a tab or the line's end"
            raise _error(path, line_no, expected, line)
        yield line_no, row, line


def normalise_id(concept_id: str) -> str:
    """Bring an id to the form the corpora use: bare numbers are OMIM ids ("OMIM:123"),
    "MESH:D000001" becomes "D000001"; other ids are kept."""
    concept_id = concept_id.strip()
    if concept_id.isdigit():
        return f"OMIM:{concept_id}"
    if concept_id.upper().startswith("MESH:"):
        return concept_id[5:]
    return concept_id


def _split_ids(raw: str, path: PathLike, line_no: int, line: str, normalise: bool) -> List[str]:
    """The '|'-joined ids before '||': as written, or brought to the corpora's form by
    `normalise_id` (MEDIC, whose bare numbers are OMIM ids)."""
    ids = raw.split("|")
    if any(not i.strip() for i in ids):
        raise _error(path, line_no, "one or more ids joined by '|' before '||'", line)
    if normalise:
        return [normalise_id(i) for i in ids]
    if any(i != i.strip() for i in ids):
        raise _error(path, line_no, "ids without spaces around them before '||'", line)
    return ids
