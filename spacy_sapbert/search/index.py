"""A FAISS index over name embeddings that answers with distinct concepts: ConceptIndex, its
storage and its search (the FAISS index types themselves: search.builders)."""
from __future__ import annotations  # FAISS's types in signatures: FAISS is imported on first use (builders)

import gzip
import hashlib
import json
import logging
import re
import shutil
import sys
import threading
import time
import zlib
from bisect import bisect_left
from collections.abc import Sequence as SequenceABC
from contextlib import contextmanager, nullcontext
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..assets import KB_FILE_GZ
from ..cache import (cache_dir, cached_build, damaged_record, derived_copy, file_records, recorded_intact,
                     recorded_sha256, write_record)
from ..kb.concepts import KBFormatError, KnowledgeBase, name_hash, name_key
from ..kb.formats import read_canonical_names, read_jsonl, write_jsonl
from .builders import (INDEX_TYPES, SQ_TYPES, ConceptIndexError, _graph_over_codes, _search_params, _split_pre_transform,
                       faiss, graph_links, make_faiss_index)

if TYPE_CHECKING:
    from ..encoders.base import Encoder

logger = logging.getLogger(__name__)

# Index types whose vectors read back exactly, so they can be converted to any other type.
EXACT_INDEX_TYPES = ("flat", "hnsw")
FORMAT_VERSION = 1
# Searches of fewer queries run on one thread (search_rows): 1,520 → 1,630 mentions/s one
# document per call on 2 cores; many queries keep every thread (4,570 → 6,340 in batches).
PARALLEL_QUERIES = 64
META_FILE = "meta.json"
FAISS_FILE = "index.faiss"
ROWS_FILE = "rows.npy"
# Bump when kb.name_hash changes, so cached row keys (ConceptIndex.row_keys) are made again.
ROW_KEYS_VERSION = 2
KB_FILE = "kb.jsonl"
# The KB as a bundled index stores it (save(compress_kb=True)): assets.KB_FILE_GZ.
# Each concept's id and types, so that linking reads the KB only when asked for it (ConceptIndex.kb).
CONCEPTS_FILE = "concepts.json"
# The names an index ships from annotated corpora (a names table, kb.formats.read_names), read
# after a user's own table unless the index config's shipped_names is false.
NAMES_FILE = "names.tsv.gz"
# The links of a scalar-quantised index's search graph, stored beside its codes (save(graph=True)).
GRAPH_FILE = "graph.npz"
# Each row's name, one a line (utf-8, gzip with mtime 0), and its kb.name_hash key: what the
# hybrid score and exact names read, so that an index storing them (save(row_files=True), as the
# bundled one and every supplement do) reads no KB on first use.
ROW_NAMES_FILE = "names.txt.gz"
ROW_KEYS_FILE = "keys.npy"
# The concept ids as one fixed-width utf-8 array (PackedIds), where a supplement stores them: its
# CONCEPTS_FILE then keeps only the types, and a load makes no str per concept.
IDS_FILE = "concept_ids.npy"
# The answers of the index's answer_scheme (kb.schemes.scheme_answers), stored with the row files.
ANSWERS_FILE = "answers.json.gz"
ROW_FILES = (ROW_NAMES_FILE, ROW_KEYS_FILE, ANSWERS_FILE)


class RowNames:
    """Row names as ROW_NAMES_FILE stores them, held as one utf-8 buffer and offsets (15 MB for a
    supplement's 538k names, where a list of str took 60 MB), each decoded when asked.

    sha256: the file's checksum, as its index records it: the names are then unzipped once into
    the cache folder with their offsets (`_unzipped_names`), and a load reads them from there
    (0.01 s for the bundled supplement's, where unzipping and finding the line breaks took 0.07);
    where the cache cannot be written they are unzipped here, as without it."""

    def __init__(self, path: Path, sha256: Optional[str] = None):
        unzipped = _unzipped_names(Path(path), sha256) if sha256 else None
        if unzipped is None:
            self._data = _gunzip(Path(path))
            self._bounds = _name_bounds(self._data)
        else:
            self._data, self._bounds = unzipped

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def __getitem__(self, row: int) -> str:
        return self._data[self._bounds[row]:self._bounds[row + 1] - 1].decode("utf-8")

    def take(self, rows: Sequence[int]) -> List[str]:
        return [self[int(r)] for r in rows]

    def all(self) -> List[str]:
        """Every name, in row order."""
        return self._data.decode("utf-8").split("\n") if len(self) else []


def _name_bounds(data: bytes) -> np.ndarray:
    """Where each name of a ROW_NAMES_FILE's bytes starts, and one past the end: name i is
    bounds[i]:bounds[i + 1] - 1."""
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    width = np.int32 if len(data) < np.iinfo(np.int32).max else np.int64
    return np.concatenate([[0], breaks + 1, [len(data) + 1]]).astype(width)


# What the cache's unzipped copy of a ROW_NAMES_FILE holds (its record, cache.write_record, lists them).
UNZIPPED_NAMES_FILES = ("names.txt", "bounds.npy")
UNZIPPED_NAMES_VERSION = 1


def _unzipped_names(path: Path, sha256: str) -> Optional[Tuple[bytes, np.ndarray]]:
    """The names of the ROW_NAMES_FILE at `path` (whose checksum is `sha256`) and their bounds,
    read from a copy unzipped once into the cache folder; None where no cache can be written
    (the caller unzips them itself)."""

    def read(folder: Path) -> Tuple[bytes, np.ndarray]:
        data, bounds = (folder / "names.txt").read_bytes(), np.load(folder / "bounds.npy")
        if bounds.ndim != 1 or not len(bounds) or int(bounds[-1]) != len(data) + 1:
            raise ValueError("the bounds do not fit the names")
        return data, bounds

    def write(staging: Path) -> None:
        data = _gunzip(path)
        (staging / "names.txt").write_bytes(data)
        np.save(staging / "bounds.npy", _name_bounds(data))

    return derived_copy(path, sha256, "row-names", UNZIPPED_NAMES_VERSION, UNZIPPED_NAMES_FILES, read, write,
                        "unzipped copy")


def _gunzip(path: Path) -> bytes:
    """A gzip file's bytes, unzipped in one zlib call into a buffer of the size its trailer
    records: GzipFile.read took the supplement's 15 MB in 600 Python steps and grew its buffer as
    it went, a peak 9 MiB higher and a third slower."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[-4:], "little")  # ISIZE: the last member's length, modulo 2**32
    data = zlib.decompress(raw, 31, size or 1)
    if len(data) % 2**32 != size:  # more than one member: zlib read the first only
        data = gzip.decompress(raw)
    return data


class PackedIds(SequenceABC):
    """Concept ids as one fixed-width bytes array (utf-8), sorted once for lookups: 2.5 MB for
    the bundled supplement's 253k ids, where a list of str took 18 and a load made each."""

    def __init__(self, ids: Sequence[str]):
        encoded = [concept_id.encode("utf-8") for concept_id in ids]
        if any(concept_id.endswith(b"\0") for concept_id in encoded):  # numpy's bytes drop trailing NULs
            raise ConceptIndexError("A concept id of the supplement ends in a NUL character; rebuild it with clean ids.")
        self._set(np.array(encoded, dtype=np.bytes_))

    @classmethod
    def of(cls, ids: Sequence[str]) -> "PackedIds":
        """`ids` packed, or `ids` itself when they are packed already."""
        return ids if isinstance(ids, PackedIds) else cls(ids)

    @classmethod
    def from_encoded(cls, encoded: np.ndarray) -> "PackedIds":
        """The ids `encoded()` gave (as IDS_FILE stores them), without a str made for each."""
        packed = cls.__new__(cls)
        packed._set(np.asarray(encoded, dtype=np.bytes_))
        return packed

    def _set(self, encoded: np.ndarray) -> None:
        self._ids = encoded
        self._order: Optional[np.ndarray] = None  # positions in id order, when not stored sorted
        if len(self._ids) > 1 and not (self._ids[1:] > self._ids[:-1]).all():
            self._order = np.argsort(self._ids, kind="stable")

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [item.decode("utf-8") for item in self._ids[position].tolist()]
        return self._ids[position].decode("utf-8")

    def encoded(self) -> np.ndarray:
        """The ids as stored (utf-8, in their order), for `positions` of another PackedIds."""
        return self._ids

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """The position of each of `ids` (encoded: a bytes array), -1 for those not held."""
        if not len(self._ids):
            return np.full(len(ids), -1, dtype=np.int64)
        ordered = self._ids if self._order is None else self._ids[self._order]
        found = np.minimum(np.searchsorted(ordered, ids), len(ordered) - 1)
        at = found if self._order is None else self._order[found]
        return np.where(ordered[found] == ids, at, -1).astype(np.int64)

    def position(self, concept_id: str) -> Optional[int]:
        found = int(self.positions(np.array([concept_id.encode("utf-8")], dtype=np.bytes_))[0])
        return None if found < 0 else found


class TypeSets(SequenceABC):
    """Each concept's types (a tuple per concept, in its stored order), held as numbers: the
    distinct types once, sorted (`names`); each distinct set of them as a run of those numbers
    (`members[starts[s]:starts[s + 1]]`); and each concept's set (`which`). A set's tuple is
    made when first asked for, and which sets hold a type of some prefixes is found by bisecting
    the sorted names and summing runs (`verdicts`): no Python step per set or per type."""

    def __init__(self, names: List[str], members: np.ndarray, starts: np.ndarray, which: np.ndarray):
        members, starts, which = (np.asarray(a) for a in (members, starts, which))
        if not (members.ndim == starts.ndim == which.ndim == 1 and len(starts) and starts[0] == 0
                and starts[-1] == len(members) and (np.diff(starts) >= 0).all()
                and all(np.issubdtype(a.dtype, np.integer) for a in (members, starts, which))
                and (not len(members) or 0 <= members.min() <= members.max() < len(names))
                and (not len(which) or 0 <= which.min() <= which.max() < len(starts) - 1)):
            raise ConceptIndexError("The stored sets of types are inconsistent; rebuild the index.")
        self.names, self.members, self.starts, self.which = names, members, starts, which
        self._tuples: List[Optional[Tuple[str, ...]]] = [None] * (len(starts) - 1)
        self._verdicts: Dict[Tuple[str, ...], np.ndarray] = {}

    @classmethod
    def of_sets(cls, sets: Sequence[Sequence[str]], which: Sequence[int]) -> "TypeSets":
        """Each distinct set of types (a sequence each) and each concept's set's number."""
        names = sorted(set().union(*sets)) if len(sets) else []
        number = {name: i for i, name in enumerate(names)}
        starts = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, sets), dtype=np.int64, count=len(sets)), out=starts[1:])
        members = np.fromiter(map(number.__getitem__, chain.from_iterable(sets)), dtype=np.int32, count=int(starts[-1]))
        return cls(names, members, starts, np.asarray(which, dtype=np.int32))

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, position: int) -> Tuple[str, ...]:
        return self.of_set(int(self.which[position]))

    def of_set(self, number: int) -> Tuple[str, ...]:
        """The types of the distinct set `number`."""
        found = self._tuples[number]
        if found is None:
            names = self.names
            found = self._tuples[number] = tuple(
                names[i] for i in self.members[self.starts[number]:self.starts[number + 1]].tolist())
        return found

    def __iter__(self) -> Iterator[Tuple[str, ...]]:
        return map(self.of_set, self.which.tolist())

    @property
    def n_sets(self) -> int:
        return len(self.starts) - 1

    def verdicts(self, prefixes: Sequence[str]) -> np.ndarray:
        """For each distinct set, whether one of its types starts with one of `prefixes`."""
        key = tuple(sorted(set(prefixes)))
        found = self._verdicts.get(key)
        if found is None:
            hits = np.zeros(len(self.names), dtype=bool)
            for prefix in key:
                hits[slice(*_prefix_range(self.names, prefix))] = True
            counts = np.concatenate([[0], np.cumsum(hits[self.members], dtype=np.int64)])
            found = counts[self.starts[1:]] > counts[self.starts[:-1]]
            if len(self._verdicts) >= 64:  # prefixes come from label types: a handful
                self._verdicts.clear()
            self._verdicts[key] = found
        return found


def _prefix_range(ordered: List[str], prefix: str) -> Tuple[int, int]:
    """Where the strings starting with `prefix` lie in the sorted list `ordered`."""
    start = bisect_left(ordered, prefix)
    if not prefix:
        return 0, len(ordered)
    if prefix[-1] == chr(sys.maxunicode):  # no next string to bisect for: walk
        end = start
        while end < len(ordered) and ordered[end].startswith(prefix):
            end += 1
        return start, end
    return start, bisect_left(ordered, prefix[:-1] + chr(ord(prefix[-1]) + 1), start)


def _read_concepts(path: Path, meta: dict) -> Tuple[dict, Sequence[str], TypeSets]:
    """An index folder's CONCEPTS_FILE as stored, less its types; its concept ids (from the file,
    or packed in IDS_FILE); and its types (TypeSets), read from the compact copy the cache keeps
    of the file (`_compact_concepts`) where one can be kept."""
    if CONCEPTS_FILE not in meta["files"]:
        raise ConceptIndexError(f"{path} keeps no {CONCEPTS_FILE} (an index of the unpublished 0.1); rebuild it "
                                "with `spacy-sapbert build-index`.")
    sha256 = recorded_sha256(meta, CONCEPTS_FILE)
    compact = _compact_concepts(path / CONCEPTS_FILE, sha256) if sha256 else None
    if compact is None:
        compact = _split_concepts(json.loads((path / CONCEPTS_FILE).read_text(encoding="utf-8")))
    stored, type_sets = compact
    if "concept_ids" in stored:
        ids = stored["concept_ids"]
    elif IDS_FILE in meta["files"]:
        ids = PackedIds.from_encoded(np.load(path / IDS_FILE))
    else:
        raise ConceptIndexError(f"{path / CONCEPTS_FILE} keeps no concept ids and {path} no {IDS_FILE}; rebuild the index.")
    return stored, ids, type_sets


def _split_concepts(stored: dict) -> Tuple[dict, TypeSets]:
    """A CONCEPTS_FILE's content less its types, and its types (stored_type_sets)."""
    return {key: value for key, value in stored.items() if key not in _TYPE_KEYS}, stored_type_sets(stored)


_TYPE_KEYS = ("types", "type_sets", "type_set")
# What the cache's compact copy of a CONCEPTS_FILE holds (its record, cache.write_record, lists them):
# the file less its types, the distinct types, and TypeSets' three arrays.
COMPACT_CONCEPTS_FILES = ("rest.json", "type_names.json", "members.npy", "starts.npy", "which.npy")
COMPACT_CONCEPTS_VERSION = 1


def _compact_concepts(path: Path, sha256: str) -> Optional[Tuple[dict, TypeSets]]:
    """The CONCEPTS_FILE at `path` (whose checksum is `sha256`) less its types, and its types,
    read from a compact copy written once into the cache folder: parsing the bundled index's and
    its supplement's files and making a tuple of types for each of their 69k sets took 0.12 s of
    every load. None where no cache can be written (the caller parses the file itself)."""

    def read(folder: Path) -> Tuple[dict, TypeSets]:
        stored = json.loads((folder / "rest.json").read_text(encoding="utf-8"))
        names = json.loads((folder / "type_names.json").read_text(encoding="utf-8"))
        return stored, TypeSets(names, *(np.load(folder / name) for name in COMPACT_CONCEPTS_FILES[2:]))

    def write(staging: Path) -> None:
        stored, type_sets = _split_concepts(json.loads(path.read_text(encoding="utf-8")))
        (staging / "rest.json").write_text(json.dumps(stored, ensure_ascii=False, separators=(",", ":")),
                                           encoding="utf-8")
        (staging / "type_names.json").write_text(json.dumps(type_sets.names, ensure_ascii=False), encoding="utf-8")
        for name, array in zip(COMPACT_CONCEPTS_FILES[2:], (type_sets.members, type_sets.starts, type_sets.which)):
            np.save(staging / name, array)

    return derived_copy(path, sha256, "concepts", COMPACT_CONCEPTS_VERSION, COMPACT_CONCEPTS_FILES, read, write,
                        "compact copy")


def _copy(source: Path, target: Path) -> None:
    """Copy a file, unless both name the same one (an index saved over its own folder)."""
    if not (target.exists() and source.resolve() == target.resolve()):
        shutil.copyfile(source, target)


def write_row_files(path: Path, names: Sequence[str], answers: Optional[dict] = None) -> List[str]:
    """Write the row names and their keys (and, given, the answers) into `path`; the files written."""
    if any("\n" in name or "\r" in name for name in names):
        raise ConceptIndexError("A name of the index holds a line break; clean the KB's names first.")
    _write_gzipped(path / ROW_NAMES_FILE, "\n".join(names).encode("utf-8"))  # bytes as RowNames splits them
    np.save(path / ROW_KEYS_FILE, np.array([name_hash(name) for name in names], dtype=np.uint64))
    if answers is None:
        return [ROW_NAMES_FILE, ROW_KEYS_FILE]
    _write_gzipped(path / ANSWERS_FILE, json.dumps(answers, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    return [ROW_NAMES_FILE, ROW_KEYS_FILE, ANSWERS_FILE]


def _write_gzipped(path: Path, data: bytes) -> None:
    """`data` gzip-compressed into `path`, without a timestamp (the same data, the same bytes) and
    as bytes, so that no platform translates its line breaks."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        out.write(data)


def numbered_type_sets(types: Iterable[Sequence[str]], count: int) -> Tuple[List[Tuple[str, ...]], np.ndarray]:
    """Each distinct set of `types` (one sequence per concept, `count` of them) once, as a tuple,
    in order of first appearance, and each concept's set's number."""
    # Two passes of C-level maps (tuples made twice): a Python step per concept took 0.04 s of
    # the bundled index's load, one per distinct set remains.
    types = list(types) if not isinstance(types, list) else types
    numbers = {key: number for number, key in enumerate(dict.fromkeys(map(tuple, types)))}
    which = np.fromiter(map(numbers.__getitem__, map(tuple, types)), dtype=np.int64, count=count)
    return list(numbers), which


def stored_type_sets(stored: dict) -> TypeSets:
    """A CONCEPTS_FILE's types (TypeSets): as a supplement stores them, each distinct set once
    ("type_sets") and each concept's set's number ("type_set"), or gathered from a list per
    concept ("types")."""
    if "type_sets" in stored:
        return TypeSets.of_sets(stored["type_sets"], stored["type_set"])
    return TypeSets.of_sets(*numbered_type_sets(stored["types"], len(stored["types"])))


def check_label_types(mapping, where: str) -> Dict[str, List[str]]:
    """`mapping` when it maps entity labels to lists of concept-type prefixes; else one sentence
    (ConceptIndexError) naming `where`."""
    if mapping is None:
        mapping = {}
    if not (isinstance(mapping, dict) and all(
            isinstance(label, str) and isinstance(prefixes, list) and all(isinstance(p, str) for p in prefixes)
            for label, prefixes in mapping.items())):
        shown = json.dumps(mapping, default=str)
        raise ConceptIndexError(
            f"{where} must map entity labels to lists of concept-type prefixes, such as "
            f'{{"Disease": ["C", "F03"], "Chemical": ["D"]}}, not {shown[:80]}.'
        )
    return mapping


def verify_files(path: Path, meta: dict) -> Optional[str]:
    """Why the files of the index at `path` do not match the sizes and checksums its meta.json
    records (one sentence), or None when every one does (or is unchanged since it last did:
    cache.damaged_record)."""
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        return (f"{path / META_FILE} records no file checksums, so its files cannot be checked; "
                "rebuild the index.")
    damaged = damaged_record(path, files)
    if damaged is None:
        return None
    file, why = damaged
    if why == "missing":
        return f"{file} is missing; copy the whole index directory or rebuild it."
    if why == "size":
        expected = files[file.name]
        written = expected.get("bytes") if isinstance(expected, dict) else expected
        return (f"{file} has {file.stat().st_size} bytes but {written} were written, so it is truncated or was "
                "changed; copy it again or rebuild the index.")
    return (f"{file} does not match the checksum in {META_FILE}, so it is corrupted; "
            "copy it again or rebuild the index.")


_BLAS: list = []  # the process's BLAS thread pools (threadpoolctl), found once
_BLAS_LOCK = threading.Lock()  # the limit is the process's: one block at a time sets and restores it


@contextmanager
def _blas_threads(threads: int):
    """numpy's BLAS on `threads` threads while in the block (one thread's block at a time): a
    few queries' projection took 0.3 ms on one thread and 3 to 8 on two, whose threads wake
    for 3 rows (a document's). OpenBLAS gives each product the same on any number of threads,
    bit for bit (its threads split the rows and columns, not the sums)."""
    with _BLAS_LOCK:
        if not _BLAS:
            from threadpoolctl import ThreadpoolController

            _BLAS.append(ThreadpoolController())
        with _BLAS[0].limit(limits=threads, user_api="blas"):
            yield


class ConceptIndex:
    """Name vectors in FAISS, each row mapped to the concept it names.

    kb: the knowledge base whose names were embedded.
    index: a FAISS inner-product index with one row per name.
    row_concepts: for each row, the position of its concept in `concept_ids`.
    meta: what built it (model fingerprint, pooling, max_length, dim, KB name and counts).
    """

    def __init__(self, kb: Optional[KnowledgeBase], index: faiss.Index, row_concepts: np.ndarray, meta: dict,
                 concepts: Optional[Tuple[List[str], List[Tuple[str, ...]]]] = None):
        """kb None: `concepts` gives the concept ids and types (CONCEPTS_FILE), and the KB is read
        from the loaded directory when first asked for (`kb`): linking needs only those."""
        self._kb = kb
        self._kb_file: Optional[Path] = None
        self._canonical: Optional[Dict[str, str]] = None  # canonical_name's, read without the KB
        self.index = index
        if kb is not None:
            self.concept_ids: List[str] = list(kb.cui_to_entity)
            self._types: Optional[List[Tuple[str, ...]]] = None
        else:
            self.concept_ids, self._types = concepts
        self.row_concepts = np.asarray(row_concepts, dtype=np.int32)
        self.meta = meta
        self.path: Optional[Path] = None  # the directory it was loaded from
        # Each alternative id's concept position, when loaded from a CONCEPTS_FILE that keeps
        # them: resolve_id then reads no KB.
        self._alt_positions: Optional[Dict[str, int]] = None
        # Each concept's types as TypeSets, gathered from the KB once when not loaded so (_type_sets_held).
        self._type_sets: Optional[TypeSets] = None
        self._selectors: Dict[Tuple[str, ...], Tuple[object, int]] = {}
        self._split: Optional[tuple] = None  # (index, its pre-transform maps, the index inside)
        # (a folder, the ROW_FILES it stores for these very rows): read in place of the KB.
        self._row_files: Optional[Tuple[Path, List[str]]] = None

    @property
    def kb(self) -> KnowledgeBase:
        """The knowledge base, read from the index directory the first time it is asked for when
        the index was loaded with its concepts file (1 s and 60 MB for the bundled index)."""
        if self._kb is None:
            kb = self._read_kb_file(lambda path: read_jsonl(path, name=self.meta.get("kb_name")),
                                    lambda kb: kb.cui_to_entity)
            kb.version = self.meta.get("kb_version", "")
            self._kb = kb
        return self._kb

    def _read_kb_file(self, read, ids_of):
        """What `read` makes of the KB file, checked to hold the concepts of CONCEPTS_FILE (their
        ids, by `ids_of`), in order."""
        try:
            made = read(self._kb_file)
        except KBFormatError as err:
            raise ConceptIndexError(f"The index's knowledge base is unreadable: {err}") from None
        if list(ids_of(made)) != self.concept_ids:
            raise ConceptIndexError(f"{self._kb_file} does not hold the concepts of {CONCEPTS_FILE} beside it; "
                                    "copy the whole index directory again or rebuild it.")
        return made

    def canonical_name(self, concept_id: str) -> Optional[str]:
        """The canonical name of a concept of the index (None for any other id): from the KB once
        it is read, else from the KB file's canonical names alone (kb.formats.read_canonical_names),
        so that showing a link's name costs no KB."""
        if self._kb is not None or self._kb_file is None:
            concept = self.kb.cui_to_entity.get(concept_id)
            return concept.canonical_name if concept is not None else None
        if self._canonical is None:
            self._canonical = self._read_kb_file(read_canonical_names, lambda names: names)
        return self._canonical.get(concept_id)

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The id under which the index holds `concept_id` (its own or another id of it), or None;
        without reading the KB where the index keeps its alternative ids (CONCEPTS_FILE)."""
        if self._kb is None and self._alt_positions is not None:
            if self.position_of(concept_id) is not None:
                return concept_id
            position = self._alt_positions.get(concept_id)
            return None if position is None else self.concept_ids[position]
        return self.kb.resolve_id(concept_id)

    def position_of(self, concept_id: str) -> Optional[int]:
        """The position of the concept with the id `concept_id` in concept_ids, or None; the map
        is made once, when first asked for, and serves every caller."""
        if getattr(self, "_positions", None) is None:
            self._positions = {c: i for i, c in enumerate(self.concept_ids)}
        return self._positions.get(concept_id)

    def concept_types(self, position: int) -> Tuple[str, ...]:
        """The types of the concept at `position` of concept_ids, without reading the KB."""
        if self._types is not None:
            return self._types[position]
        return tuple(self.kb.cui_to_entity[self.concept_ids[position]].types)

    def has_type(self, position: int, prefixes: Sequence[str]) -> bool:
        """Whether the concept at `position` has a type starting with one of `prefixes`
        (Concept.has_type)."""
        if isinstance(self._types, TypeSets):
            return bool(self._types.verdicts(prefixes)[self._types.which[position]])
        prefixes = tuple(prefixes)
        return any(t.startswith(prefixes) for t in self.concept_types(position))

    @classmethod
    def build(
        cls,
        kb: KnowledgeBase,
        encoder: "Encoder",
        index_type: str = "flat",
        show_progress: Optional[bool] = None,
        dim: Optional[int] = None,
        work_dir: Optional[Union[str, Path]] = None,
        chunk_size: int = 65_536,
    ) -> "ConceptIndex":
        """Embed every name of `kb` with `encoder` and index them (projected to `dim`
        dimensions if given; see make_faiss_index).

        work_dir: stream the vectors to disk there, `chunk_size` names at a time, and resume a
            killed build of the same names and model from its last chunk (search/streamed.py); the
            caller removes it once the index is saved."""
        if index_type not in INDEX_TYPES:
            raise ConceptIndexError(
                f"Unknown index type {index_type!r}; use one of {', '.join(INDEX_TYPES)}."
            )
        if len(kb) == 0:
            raise ConceptIndexError(f"Knowledge base {kb.name!r} has no concepts, so there is nothing to index.")
        start = time.perf_counter()
        names, rows = kb.name_row_concepts()
        if work_dir is not None:
            from .streamed import encode_to_disk

            vectors = encode_to_disk(names, encoder, Path(work_dir), chunk_size, show_progress)
        else:
            vectors = encoder.encode(names, show_progress=show_progress)
        index = cls.from_vectors(kb, vectors, encoder.fingerprint, index_type, dim)
        index.meta.update({
            "format_version": FORMAT_VERSION,
            "model": getattr(encoder, "exported_from", encoder.name_or_path),
            "name_precision": getattr(encoder, "precision", "fp32"),
            "model_fingerprint": encoder.fingerprint,
            "pooling": encoder.pooling,
            "max_length": encoder.max_length,
            "dim": encoder.dim,
            "index_type": index_type,
            "projected_dim": dim if dim and dim != encoder.dim else None,
            "kb_name": kb.name,
            "kb_version": kb.version,
            "n_concepts": len(kb),
            "n_names": len(names),
            "build_seconds": round(time.perf_counter() - start, 1),
        })
        return index

    @classmethod
    def from_vectors(cls, kb: KnowledgeBase, vectors: np.ndarray, fingerprint: str, index_type: str = "flat",
                     dim: Optional[int] = None) -> "ConceptIndex":
        """An index of `kb`'s names (`name_rows` order) whose vectors the model with
        `fingerprint` made: the harness's dictionaries, whose names it embeds through a cache."""
        _, rows = kb.name_row_concepts()
        return cls(kb, make_faiss_index(vectors, index_type, dim), rows, {"model_fingerprint": fingerprint})

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def converted(self, index_type: str, dim: Optional[int] = None, prefer: Sequence[str] = ()) -> "ConceptIndex":
        """The same names and concepts in another FAISS index type, without encoding anything.

        From an exact index (flat or hnsw): any type, projected to `dim` dimensions if given,
        and with `prefer` (see preferred_rows) leaving out names a preferred concept also bears.
        From a scalar-quantised one (sq8, sq6, sq4, projected or not): only its HNSW graph
        (hnsw-sq8, …) over the very same codes, as a bundled compact index is unpacked."""
        current = self.meta.get("index_type", "flat")
        start = time.perf_counter()
        rows, extra = self.row_concepts, {}
        if current in EXACT_INDEX_TYPES and not self.meta.get("projected_dim"):
            vectors = self.index.reconstruct_n(0, self.index.ntotal)
            if prefer:
                keep = self.preferred_rows(prefer)
                vectors, rows = vectors[keep], rows[keep]
                extra = {"name_precedence": list(prefer), "n_names": int(keep.sum()),
                         "n_shared_names_left_out": int((~keep).sum())}
            index = make_faiss_index(vectors, index_type, dim)
            projected = dim if dim and dim != vectors.shape[1] else None
        elif current in SQ_TYPES and index_type == f"hnsw-{current}" and dim is None and not prefer:
            index = _graph_over_codes(self.index, self.stored_links())
            meta = dict(self.meta, index_type=index_type,
                        build_seconds=round(self.meta.get("build_seconds", 0) + time.perf_counter() - start, 1))
            meta.pop("files", None)
            return self._with_rows_of(index, meta)
        else:
            raise ConceptIndexError(
                f"A {current} index stores approximate vectors, so converting it to {index_type} would "
                f"compound the loss; convert from a {' or '.join(EXACT_INDEX_TYPES)} index, or build anew"
                + (f" (from {current}, only hnsw-{current} over the same codes)." if current in SQ_TYPES else ".")
            )
        meta = dict(self.meta, index_type=index_type, projected_dim=projected, **extra,
                    build_seconds=round(self.meta.get("build_seconds", 0) + time.perf_counter() - start, 1))
        meta.pop("files", None)
        return ConceptIndex(self.kb, index, rows, meta)

    def _with_rows_of(self, index: faiss.Index, meta: dict) -> "ConceptIndex":
        """An index of these very rows and concepts in another FAISS index: the KB, when not yet
        read, is read from this one's file when asked for, and the row files come along."""
        if self._kb is not None or self._kb_file is None:
            return ConceptIndex(self.kb, index, self.row_concepts, meta)
        same = ConceptIndex(None, index, self.row_concepts, meta, concepts=(self.concept_ids, self._types))
        same._kb_file, same._alt_positions, same._type_sets = self._kb_file, self._alt_positions, self._type_sets
        same._canonical = self._canonical
        same._row_files = self._row_files
        return same

    def stored_row_file(self, name: str) -> Optional[Path]:
        """Where the index's folder stores the row file `name` (ROW_FILES) for these rows, or None."""
        if self._row_files is None or name not in self._row_files[1]:
            return None
        return self._row_files[0] / name

    def stored_answers(self, patterns: Sequence[str]) -> Optional[Dict[str, List[str]]]:
        """The answers of `patterns` (kb.schemes.scheme_answers) when the index stores those of
        its answer_scheme and `patterns` is that scheme; else None."""
        stored = self.stored_row_file(ANSWERS_FILE)
        if stored is None or list(patterns) != list(self.meta.get("answer_scheme", [])):
            return None
        with gzip.open(stored, "rt", encoding="utf-8") as handle:
            return json.load(handle)

    def set_ef_search(self, ef_search: int) -> None:
        """Candidates a graph index keeps while searching (its recall against its speed; stored
        with the index): 256 by default, 1,024 for ≥ 0.99 recall@10 at 4M names (README)."""
        graph = faiss.downcast_index(_split_pre_transform(self.index)[1])
        if not isinstance(graph, faiss.IndexHNSW):
            raise ConceptIndexError(f"efSearch applies to the hnsw index types, not to {self.meta.get('index_type')!r}.")
        if ef_search < 1:
            raise ConceptIndexError(f"efSearch must be at least 1, not {ef_search}.")
        graph.hnsw.efSearch = ef_search

    def preferred_rows(self, prefer: Sequence[str]) -> np.ndarray:
        """Which rows to keep when a name is borne by several concepts that could answer the same
        entity label: only those of the concepts whose id matches the earliest pattern in
        `prefer` (regular expressions an id must match whole; ids matching none come last). So
        where MeSH and MONDO both name "erythema nodosum", prefer=("D[0-9]+", "C[0-9]+") lets
        MeSH's descriptor answer, while the MONDO concept keeps its other names and stays in the KB.

        Concepts compete within a label class of meta["label_types"] (all together if none).
        Needs rows in the KB's own name order, as `build` writes them."""
        _, rows = self.kb.name_row_concepts()
        if not np.array_equal(rows, self.row_concepts):
            raise ConceptIndexError(
                "This index's rows no longer follow its KB's names (it was filtered or converted), so "
                "name precedence cannot be applied; apply it to the index `build-index` wrote."
            )
        return self._preferred_mask(prefer)

    def row_names(self) -> List[str]:
        """The name each row of the index embeds: the KB's names in order, less those that name
        precedence (meta["name_precedence"], see preferred_rows) left to other concepts."""
        stored = self.stored_row_file(ROW_NAMES_FILE)
        if stored is not None:
            names = RowNames(stored).all()
            if len(names) != len(self):
                raise ConceptIndexError(f"{stored} names {len(names)} rows, but the index beside it holds {len(self)}; "
                                        "copy the whole index directory again or rebuild it.")
            return names
        names, rows = self.kb.name_row_concepts()
        if len(names) != len(self) and self.meta.get("name_precedence"):
            keep = self._preferred_mask(self.meta["name_precedence"])
            names, rows = [n for n, kept in zip(names, keep) if kept], rows[keep]
        if not np.array_equal(rows, self.row_concepts):
            raise ConceptIndexError(
                "This index's rows do not follow its KB's names, so they cannot be named (for the hybrid "
                "score and exact names first); rebuild it with `spacy-sapbert build-index`, or set "
                "sparse_weight to 0 and exact_first to false."
            )
        return names

    def state_key(self, *parts) -> Optional[str]:
        """A cache key for state derived from this index's row names (the hybrid score's tf-idf,
        row_keys): `parts` with the KB's and rows' checksums; None for an index saved without
        them, whose state is made afresh."""
        files = self.meta.get("files", {})
        kb_file = next((files[name] for name in sorted(files) if name.startswith("kb.jsonl")), None)
        if kb_file is None or "rows.npy" not in files:
            return None
        return hashlib.sha256(json.dumps(
            [*parts, kb_file["sha256"], files["rows.npy"]["sha256"], self.meta.get("name_precedence"),
             len(self)]).encode()).hexdigest()[:16]

    def row_keys(self) -> np.ndarray:
        """Each row's name as kb.name_hash gives it (uint64), for telling which hits are a
        mention's exact name. Made on first use from the row names (1.1 s for the bundled
        index) and kept in the cache (1.7 MB), so a later load reads it in milliseconds."""
        if getattr(self, "_row_keys", None) is not None and len(self._row_keys) == len(self):
            return self._row_keys
        stored = self.stored_row_file(ROW_KEYS_FILE)
        if stored is not None:
            keys = np.load(stored)
            if len(keys) != len(self):
                raise ConceptIndexError(f"{stored} holds {len(keys)} keys, but the index beside it holds {len(self)} "
                                        "rows; copy the whole index directory again or rebuild it.")
            self._row_keys = keys
            return keys
        def made() -> np.ndarray:
            return np.array([name_hash(name) for name in self.row_names()], dtype=np.uint64)

        key = self.state_key("row-keys", ROW_KEYS_VERSION)
        if key is None:
            self._row_keys = made()
            return self._row_keys
        folder = cache_dir() / f"row-keys-{key}"

        def intact(path: Path) -> bool:
            if not recorded_intact(path, ["keys.npy"]):
                return False
            try:
                self._row_keys = np.load(path / "keys.npy")
            except (OSError, ValueError):
                return False
            return len(self._row_keys) == len(self)

        def build(staging: Path) -> None:
            np.save(staging / "keys.npy", made())
            write_record(staging, ["keys.npy"])

        cached_build(folder, build, intact, "index rows' exact-name keys", takes="about a second for the bundled index")
        if not intact(folder):  # read what the build wrote
            raise ConceptIndexError(f"The exact-name keys in {folder} cannot be read; delete the folder and retry.")
        return self._row_keys

    def _key_sort(self) -> Tuple[np.ndarray, np.ndarray]:
        """row_keys and their sorted order, made on first use. Derived from the very array
        row_keys returns, so keys made again are sorted again; the order stays numpy's own index
        type: searchsorted would copy any other at each call."""
        keys = self.row_keys()
        if getattr(self, "_key_order", (None,))[0] is not keys:
            self._key_order = (keys, np.argsort(keys, kind="stable"))
        return self._key_order

    def rows_named(self, key: int) -> np.ndarray:
        """The rows whose name has kb.name_hash `key`, in row order: a binary search of
        row_keys through their sorted order (made on first use, 8 bytes a row: 1.7 MB for the
        bundled index, 6 MB with its supplement; no sorted copy of the keys), not a scan of
        every row."""
        keys, order = self._key_sort()
        key = np.uint64(key)
        first, last = (np.searchsorted(keys, key, side=side, sorter=order) for side in ("left", "right"))
        return order[first:last]

    def named_among(self, keys: np.ndarray) -> np.ndarray:
        """Whether some row's name has each kb.name_hash of `keys` (rows_named for many at once)."""
        sorted_keys, order = self._key_sort()
        keys = np.asarray(keys, dtype=np.uint64)
        return (np.searchsorted(sorted_keys, keys, side="right", sorter=order)
                > np.searchsorted(sorted_keys, keys, side="left", sorter=order))

    def _preferred_mask(self, prefer: Sequence[str]) -> np.ndarray:
        names, cuis = self.kb.name_rows()
        try:
            patterns = [re.compile(p) for p in prefer]
        except re.error as err:
            raise ConceptIndexError(f"Name precedence pattern {err.pattern!r} is not a regular expression: {err}.") from None
        rank = {cui: next((i for i, p in enumerate(patterns) if p.fullmatch(cui)), len(patterns))
                for cui in set(cuis)}
        label_types = self.meta.get("label_types")

        def labels(cui: str) -> List[str]:
            if not label_types:  # one class: every concept competes with every other
                return [""]
            concept = self.kb.cui_to_entity[cui]
            return [label for label, prefixes in label_types.items() if concept.has_type(prefixes)]

        classes = {cui: labels(cui) for cui in set(cuis)}
        best: Dict[Tuple[str, str], int] = {}
        for name, cui in zip(names, cuis):
            for label in classes[cui]:
                key = (name_key(name), label)
                best[key] = min(best.get(key, rank[cui]), rank[cui])
        return np.array([
            not classes[cui] or any(best[(name_key(name), label)] >= rank[cui] for label in classes[cui])
            for name, cui in zip(names, cuis)
        ])

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the encoder that built the index."""
        return self.meta["model_fingerprint"]

    def check_encoder(self, encoder: "Encoder", where: str = "this index") -> None:
        """Raise if `encoder` is not the model the index was built with."""
        if encoder.fingerprint != self.fingerprint:
            raise ConceptIndexError(
                f"{where} was built with model {self.meta.get('model')!r} (fingerprint "
                f"{self.fingerprint}, pooling {self.meta.get('pooling')}, max_length "
                f"{self.meta.get('max_length')}), not with {encoder.name_or_path!r} (fingerprint "
                f"{encoder.fingerprint}); rebuild it with `spacy-sapbert build-index`."
            )

    def _type_sets_held(self) -> TypeSets:
        """Each concept's types as TypeSets: as loaded from the CONCEPTS_FILE, or gathered from
        the KB once."""
        if isinstance(self._types, TypeSets):
            return self._types
        if self._type_sets is None:
            n_concepts = len(self.concept_ids)
            self._type_sets = TypeSets.of_sets(
                *numbered_type_sets((self.concept_types(i) for i in range(n_concepts)), n_concepts))
        return self._type_sets

    def _selector(self, type_prefixes: Sequence[str]) -> Tuple[object, int]:
        key = tuple(sorted(type_prefixes))
        if key not in self._selectors:
            # Each distinct set of types is asked once (291k concepts share 69k sets; asking each
            # concept took a second of the bundled pipe's load), by array steps (TypeSets.verdicts):
            # 3 ms for the bundled pipe's two labels, against 70 to 90 asking each type in Python.
            type_sets = self._type_sets_held()
            # One bit a row (26 KB for 208k names), where a set of row ids took megabytes.
            member = type_sets.verdicts(key)[type_sets.which][self.row_concepts]
            bitmap = np.packbits(member, bitorder="little")
            selector = faiss.IDSelectorBitmap(len(member), faiss.swig_ptr(bitmap))
            selector.bitmap_array = bitmap  # the selector reads this buffer: keep it alive
            self._selectors[key] = (selector, int(member.sum()))
        return self._selectors[key]

    def allowed_rows(self, type_prefixes: Optional[Sequence[str]] = None) -> int:
        """How many rows name concepts with a type starting with one of `type_prefixes` (all
        rows for None or empty)."""
        return self._selector(type_prefixes)[1] if type_prefixes else len(self)

    def search_rows(self, vectors: np.ndarray, n_rows: int,
                    type_prefixes: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Each query vector's `n_rows` best name rows: (inner products, row ids), best first,
        row -1 where fewer rows match; only rows of concepts with a type starting with one of
        `type_prefixes` when given. Rows become concepts in `ranking` (search_concepts).

        vectors: (n, dim) unit vectors from the index's encoder.
        """
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.index.d:
            raise ConceptIndexError(
                f"Query vectors have shape {vectors.shape}, but the index holds {self.index.d}-d "
                "vectors; encode queries with the model the index was built with."
            )
        params = _search_params(self.index, self._selector(type_prefixes)[0]) if type_prefixes else None
        searched, vectors = self._searchable(vectors)
        if len(vectors) >= PARALLEL_QUERIES:
            return searched.search(vectors, n_rows, params=params)
        # A few queries (one document's) search faster on one thread: OpenMP's idle threads
        # spin beside the encoder's. Each query's answer is the same on any number of threads.
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            return searched.search(vectors, n_rows, params=params)
        finally:
            faiss.omp_set_num_threads(threads)

    def _searchable(self, vectors: np.ndarray) -> Tuple[faiss.Index, np.ndarray]:
        """The FAISS index that search asks and the queries in its space: a pre-transform's
        maps are applied here in float64 (_split_pre_transform)."""
        if getattr(self, "_split", None) is None or self._split[0] is not self.index:
            self._split = (self.index, *_split_pre_transform(self.index))
        _, maps, searched = self._split
        if not maps:
            return searched, vectors
        with _blas_threads(1) if len(vectors) < PARALLEL_QUERIES else nullcontext():
            for matrix, bias in maps:
                projected = vectors.astype(np.float64) @ matrix.T
                vectors = np.ascontiguousarray(projected + bias if bias is not None else projected, dtype=np.float32)
        return searched, vectors

    def stored_links(self) -> Optional[Dict[str, np.ndarray]]:
        """The links of this scalar-quantised index's search graph, when its directory stores
        them (GRAPH_FILE); None when the graph must be built."""
        if self.path is None or GRAPH_FILE not in self.meta.get("files", {}):
            return None
        with np.load(self.path / GRAPH_FILE) as stored:
            return {name: stored[name] for name in stored.files}

    def save(self, path: Union[str, Path], compress_kb: bool = False, graph: bool = False,
             row_files: bool = False) -> Path:
        """Write the index as a self-contained directory; return it. compress_kb: store the KB
        gzip-compressed (kb.jsonl.gz, about 5× smaller), as a bundled index does. graph: for a
        scalar-quantised index, build its search graph now and store the links (GRAPH_FILE,
        about 8 MB for 208k names), so that a user's first search sets them instead of building.
        row_files: store the row names and keys, and the answers of meta["answer_scheme"]
        (ROW_FILES, 3 MB for the bundled index), so that first use reads no KB; row files the
        index was loaded with are copied in any case. A KB not yet read is copied as stored."""
        path = Path(path)
        current = self.meta.get("index_type", "flat")
        if graph and current not in SQ_TYPES:
            raise ConceptIndexError(f"Only a scalar-quantised index ({', '.join(SQ_TYPES)}) stores its graph's "
                                    f"links; this one is {current}.")
        links = graph_links(_graph_over_codes(self.index, self.stored_links())) if graph else None
        path.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(path / FAISS_FILE))
        np.save(path / ROWS_FILE, self.row_concepts)
        kb_file = KB_FILE_GZ if compress_kb else KB_FILE
        if self._kb is None and self._kb_file is not None and self._kb_file.name in (kb_file, KB_FILE_GZ):
            kb_file = self._kb_file.name  # never parsed: copied (1 s and 60 MB less for the bundled KB)
            _copy(self._kb_file, path / kb_file)
            alt_positions = dict(self._alt_positions or {})
        else:
            write_jsonl(self.kb, path / kb_file)
            alt_positions = {alt: self.position_of(cui) for alt, cui in self.kb.alternative_ids().items()}
        concepts = {"concept_ids": list(self.concept_ids),
                    "types": [list(self.concept_types(i)) for i in range(len(self.concept_ids))],
                    # What resolve_id reads without the KB: each alternative id and its concept's position.
                    "alt_ids": list(alt_positions),
                    "alt_positions": list(alt_positions.values())}
        (path / CONCEPTS_FILE).write_text(json.dumps(concepts, ensure_ascii=False, separators=(",", ":")) + "\n",
                                          encoding="utf-8")
        files = [FAISS_FILE, ROWS_FILE, kb_file, CONCEPTS_FILE]
        if row_files:
            answers, scheme = None, self.meta.get("answer_scheme")
            if scheme:
                from ..kb.schemes import scheme_answers

                answers = scheme_answers(self.kb, scheme)
            files += write_row_files(path, self.row_names(), answers)
        elif self._row_files is not None:
            for name in self._row_files[1]:
                _copy(self._row_files[0] / name, path / name)
            files += self._row_files[1]
        if links is not None:
            np.savez_compressed(path / GRAPH_FILE, **links)
            files.append(GRAPH_FILE)
        elif (path / GRAPH_FILE).exists():
            (path / GRAPH_FILE).unlink()
        meta = dict(self.meta)
        meta["files"] = file_records(path, files)
        (path / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        return path

    @classmethod
    def load(cls, path: Union[str, Path], encoder: Optional["Encoder"] = None, mmap: bool = False) -> "ConceptIndex":
        """Read an index directory, checking every file against `meta.json` and, when given,
        the encoder against the fingerprint the index was built with.

        mmap: map the FAISS file's vectors read-only instead of reading them into memory, so
        only the pages a search touches are loaded and processes share them (flat, sq8 and the
        vectors of hnsw/hnsw-sq8; IVF lists are read as usual)."""
        path = Path(path)
        meta_path = path / META_FILE
        if not meta_path.exists():
            raise ConceptIndexError(
                f"{path} is not a concept index (no {META_FILE}); build one with "
                "`spacy-sapbert build-index`."
            )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ConceptIndexError(f"{meta_path} is not valid JSON; rebuild the index.") from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise ConceptIndexError(
                f"{meta_path} has format version {meta.get('format_version')!r}, but this "
                f"spacy-sapbert reads version {FORMAT_VERSION}; rebuild the index."
            )
        problem = verify_files(path, meta)
        if problem:
            raise ConceptIndexError(problem)
        kb_file = KB_FILE_GZ if KB_FILE_GZ in meta.get("files", {}) else KB_FILE
        stored, ids, type_sets = _read_concepts(path, meta)
        concepts = (ids, type_sets)
        n_concepts = len(ids)
        if len(type_sets) != n_concepts:
            raise ConceptIndexError(f"{path / CONCEPTS_FILE} gives types to {len(type_sets)} concepts but holds "
                                    f"{n_concepts}; rebuild the index.")
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0
        index = faiss.read_index(str(path / FAISS_FILE), flags)
        rows = np.load(path / ROWS_FILE)
        if index.ntotal != len(rows) or index.d != meta.get("dim") or n_concepts != meta.get("n_concepts"):
            raise ConceptIndexError(
                f"{path}: the FAISS index ({index.ntotal} rows, {index.d}-d), the row map "
                f"({len(rows)} rows) and the KB ({n_concepts} concepts) disagree with {META_FILE}; "
                "rebuild the index."
            )
        if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or (len(rows) and (rows.min() < 0 or rows.max() >= n_concepts)):
            raise ConceptIndexError(
                f"{path / ROWS_FILE} maps rows to concepts outside the KB's {n_concepts} (it must hold one concept "
                "position per row); rebuild the index."
            )
        check_label_types(meta.get("label_types", {}), f"{meta_path}'s label_types")
        loaded = cls(None, index, rows, meta, concepts=concepts)
        if "alt_ids" in stored:
            loaded._alt_positions = dict(zip(stored["alt_ids"], stored["alt_positions"]))
        loaded._kb_file = path / kb_file
        loaded.path = path
        stored_rows = [name for name in ROW_FILES if name in meta["files"]]
        loaded._row_files = (path, stored_rows) if stored_rows else None
        if encoder is not None:
            loaded.check_encoder(encoder, where=f"The index at {path}")
        return loaded

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["index"] = faiss.serialize_index(self.index)
        state["_selectors"] = {}
        state["_split"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        state["index"] = faiss.deserialize_index(state["index"])
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"ConceptIndex({self.meta.get('kb_name')!r}, concepts={len(self.concept_ids)}, "
            f"names={len(self)}, type={self.meta.get('index_type')!r})"
        )
