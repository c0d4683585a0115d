"""An index with a supplement: many more names, in a far more compact layout, searched beside it.

The bundled index carries one (`supplement/` in its folder): MeSH's supplementary chemical
concepts and the drug names MeSH lacks (538k names) as product-quantised codes in inverted lists,
40 bytes a name against the main index's 240, with their row names and exact-name keys and
without a KB file. A query searches both and keeps the best rows of either; the main index's
rows, scores and hybrid state are exactly what they are without the supplement, so a mention
whose best rows are all the main index's links as before. A concept of the main index may have
rows in the supplement (a drug's brand names); a concept only the supplement holds comes after
the main index's concepts.

    supplemented = SupplementedIndex(ConceptIndex.load(main), ConceptIndex.load(main / SUPPLEMENT_DIR))
"""
import hashlib
import json
import os
import shutil
from collections import ChainMap
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Container, Iterator, List, Optional, Tuple, Union

import numpy as np

from ..cache import derived_copy, file_records, recorded_sha256
from ..kb.concepts import Concept, KnowledgeBase
from .index import (CONCEPTS_FILE, FAISS_FILE, IDS_FILE, META_FILE, PARALLEL_QUERIES, ROW_KEYS_FILE, ROW_NAMES_FILE,
                    ROWS_FILE, ConceptIndex, ConceptIndexError, PackedIds, RowNames, stored_type_sets,
                    write_row_files)

SUPPLEMENT_DIR = "supplement"
# The supplement's row names, one a line (utf-8, gzip with mtime 0), and their kb.name_hash keys.
NAMES_FILE = ROW_NAMES_FILE
KEYS_FILE = ROW_KEYS_FILE
_SIDE: dict = {}  # this process's second thread for searches (_at_once; a forked child makes its own)


def _at_once(here: Callable, there: Callable) -> tuple:
    """(here(), there()), `there` run on this process's second thread while the caller runs
    `here` (FAISS lets go of the GIL while it searches)."""
    pid = os.getpid()
    if pid not in _SIDE:
        _SIDE.clear()
        _SIDE[pid] = ThreadPoolExecutor(1, thread_name_prefix="sapbert-supplement")
    pending = _SIDE[pid].submit(there)
    return here(), pending.result()


def save_supplement(index: ConceptIndex, path: Union[str, Path]) -> Path:
    """Write `index` as a supplement: its codes, rows, concepts (ids and types), row names and
    their exact-name keys, and no KB (SupplementedIndex.kb makes its concepts from the names)."""
    path = Path(path)
    names = index.row_names()
    path.mkdir(parents=True, exist_ok=True)
    import faiss

    faiss.write_index(index.index, str(path / FAISS_FILE))
    np.save(path / ROWS_FILE, index.row_concepts)
    # Each distinct set of types once (the 253k chemicals share 49k): a smaller file, and a load
    # that makes no list per concept.
    sets: dict = {}
    which = [sets.setdefault(tuple(index.concept_types(i)), len(sets)) for i in range(len(index.concept_ids))]
    concepts = {"type_sets": [list(t) for t in sets], "type_set": which}
    (path / CONCEPTS_FILE).write_text(json.dumps(concepts, ensure_ascii=False, separators=(",", ":")) + "\n",
                                      encoding="utf-8")
    # The ids packed (a load makes no str per concept: 20 MB less for the bundled supplement).
    np.save(path / IDS_FILE, PackedIds.of(index.concept_ids).encoded())
    written = write_row_files(path, names)
    meta = {key: value for key, value in index.meta.items() if key != "files"}
    meta["files"] = file_records(path, [FAISS_FILE, ROWS_FILE, CONCEPTS_FILE, IDS_FILE, *written])
    (path / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return path


class _MergedIds(Sequence):
    """The concept ids of an index with a supplement: the main index's, then those only the
    supplement holds (`added`: their supplement positions), decoded when asked."""

    def __init__(self, main: Sequence[str], supplement: PackedIds, added: np.ndarray):
        self._main, self._supplement, self._added = main, supplement, added

    def __len__(self) -> int:
        return len(self._main) + len(self._added)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        n_main = len(self._main)
        return self._main[position] if position < n_main else self._supplement[int(self._added[position - n_main])]

    def __iter__(self) -> Iterator[str]:
        yield from self._main
        for position in self._added.tolist():
            yield self._supplement[position]


# What the cache keeps of a supplement beside its index (_positions_among).
POSITIONS_FILES = ("positions.npy",)
POSITIONS_VERSION = 1


def _positions_among(main: ConceptIndex, supplement: ConceptIndex) -> np.ndarray:
    """Each concept of `supplement` (its ids packed) at its position among `main`'s concepts, -1
    where `main` lacks it: found with both lists packed (44 ms of each load for the bundled index
    and its supplement), and kept in the cache where both index folders record their files'
    checksums (main's concepts file, the supplement's packed ids), which then key it."""
    ids = supplement.concept_ids

    def found() -> np.ndarray:
        return PackedIds(main.concept_ids).positions(ids.encoded())

    shas = [recorded_sha256(main.meta, CONCEPTS_FILE), recorded_sha256(supplement.meta, IDS_FILE)]
    if None in shas:
        return found()

    def read(folder: Path) -> np.ndarray:
        position = np.load(folder / POSITIONS_FILES[0])
        if position.shape != (len(ids),) or not np.issubdtype(position.dtype, np.integer) or (
                len(position) and not -1 <= position.min() <= position.max() < len(main.concept_ids)):
            raise ConceptIndexError("the positions do not fit the indexes")
        return position

    def write(staging: Path) -> None:
        np.save(staging / POSITIONS_FILES[0], found())

    key = hashlib.sha256(" ".join(shas).encode("ascii")).hexdigest()
    cached = derived_copy(supplement.path / IDS_FILE, key, "supplement-positions", POSITIONS_VERSION, POSITIONS_FILES,
                          read, write, "positions among its index's concepts")
    return found() if cached is None else cached


class SupplementedIndex:
    """A ConceptIndex (`main`) searched together with a supplement (`supplement`, loaded from
    a folder save_supplement wrote, built with the same model): what ranking and the candidate
    generator ask of an index, over both. Rows: the main index's, then the supplement's;
    concepts: the main index's, then those only the supplement holds."""

    # The supplement's best rows a search merges at most (of the 64 the hybrid score reads).
    rows = 16

    def __init__(self, main: ConceptIndex, supplement: ConceptIndex):
        if supplement.fingerprint != main.fingerprint:
            raise ConceptIndexError(f"The supplement at {supplement.path} was built with another model "
                                    f"(fingerprint {supplement.fingerprint}) than its index ({main.fingerprint}); "
                                    "rebuild it.")
        self.main, self.supplement = main, supplement
        self.names = RowNames(supplement.path / NAMES_FILE, recorded_sha256(supplement.meta, NAMES_FILE))
        self._keys = np.load(supplement.path / KEYS_FILE)
        if not len(self.names) == len(self._keys) == len(supplement):
            raise ConceptIndexError(f"{supplement.path}: its names, keys and rows disagree; rebuild the supplement.")
        # Each supplement concept's position among the concepts of both (-1: only it holds it),
        # found with the ids packed (PackedIds), which then stand for the supplement's list.
        packed = PackedIds.of(supplement.concept_ids)
        supplement.concept_ids = packed
        position = _positions_among(main, supplement)
        new = np.flatnonzero(position < 0)
        self._n_main = len(main.concept_ids)
        position[new] = self._n_main + np.arange(len(new))
        self._new = new  # supplement positions of the concepts only it holds
        self._position = position
        self.concept_ids = _MergedIds(main.concept_ids, packed, new)
        self.row_concepts = np.concatenate([main.row_concepts, position[supplement.row_concepts]]).astype(np.int32)
        self.meta = main.meta
        self.path = main.path
        self.index = main.index
        self._kb: Optional[KnowledgeBase] = None
        self.side_by_side = True  # a document's queries search on two threads at once (search_rows)

    # What the linker asks of any index.
    @property
    def fingerprint(self) -> str:
        return self.main.fingerprint

    def check_encoder(self, encoder, where: str = "this index") -> None:
        self.main.check_encoder(encoder, where)

    def __len__(self) -> int:
        return len(self.main) + len(self.supplement)

    def concept_types(self, position: int) -> Tuple[str, ...]:
        if position < self._n_main:
            return self.main.concept_types(position)
        return self.supplement.concept_types(int(self._new[position - self._n_main]))

    def has_type(self, position: int, prefixes: Sequence[str]) -> bool:
        if position < self._n_main:
            return self.main.has_type(position, prefixes)
        return self.supplement.has_type(int(self._new[position - self._n_main]), prefixes)

    def allowed_rows(self, type_prefixes: Optional[Sequence[str]] = None) -> int:
        return self.main.allowed_rows(type_prefixes) + self.supplement.allowed_rows(type_prefixes)

    def search_rows(self, vectors: np.ndarray, n_rows: int,
                    type_prefixes: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The best `n_rows` rows of both (ConceptIndex.search_rows), the main index's first
        among equal scores; the supplement is not searched where none of its rows may answer."""
        # A few queries (a document's) search on one thread each (ConceptIndex.search_rows): two
        # searches run side by side, each query's rows the same on either thread.
        few = len(vectors) < PARALLEL_QUERIES and self.side_by_side
        if not self.supplement.allowed_rows(type_prefixes):
            if not (few and len(vectors) >= 2):
                return self.main.search_rows(vectors, n_rows, type_prefixes)
            # No supplement to search (a disease's types): the index's queries in two halves.
            half = len(vectors) // 2
            parts = _at_once(lambda: self.main.search_rows(vectors[:half], n_rows, type_prefixes),
                             lambda: self.main.search_rows(vectors[half:], n_rows, type_prefixes))
            return tuple(np.concatenate(pair) for pair in zip(*parts))
        main = lambda: self.main.search_rows(vectors, n_rows, type_prefixes)  # noqa: E731
        more = lambda: self.supplement.search_rows(vectors, min(n_rows, self.rows), type_prefixes)  # noqa: E731
        (scores, rows), (more_scores, more_rows) = _at_once(main, more) if few else (main(), more())
        more_rows = np.where(more_rows >= 0, more_rows + len(self.main), -1)
        both_rows = np.concatenate([rows, more_rows], axis=1)
        both = np.concatenate([scores, more_scores], axis=1)
        both = np.where(both_rows >= 0, both, -np.inf).astype(np.float32)
        order = np.argsort(-both, axis=1, kind="stable")[:, :n_rows]
        kept_rows = np.take_along_axis(both_rows, order, axis=1)
        kept = np.take_along_axis(both, order, axis=1)
        return np.where(kept_rows >= 0, kept, scores.dtype.type(-np.finfo(np.float32).max)), kept_rows

    def row_keys(self) -> np.ndarray:
        if getattr(self, "_row_keys", None) is None:
            self._row_keys = np.concatenate([self.main.row_keys(), self._keys])
            # The parts become views of the whole, so the keys are held once.
            self.main._row_keys, self._keys = self._row_keys[:len(self.main)], self._row_keys[len(self.main):]
        return self._row_keys

    _key_sort = ConceptIndex._key_sort
    rows_named = ConceptIndex.rows_named
    named_among = ConceptIndex.named_among

    def row_names(self) -> List[str]:
        return self.main.row_names() + self.names.all()

    def set_ef_search(self, ef_search: int) -> None:
        self.main.set_ef_search(ef_search)

    def state_key(self, *parts) -> Optional[str]:
        """The main index's key, for state derived from its rows alone (answers, hybrid state)."""
        return self.main.state_key(*parts)

    @property
    def kb(self) -> "SupplementedKB":
        """The main index's KB with the concepts only the supplement holds, each made from its
        rows (its first name canonical) when looked up: scispaCy's `cui_to_entity` over both."""
        if self._kb is None:
            self._kb = SupplementedKB(self)
        return self._kb

    def position_of(self, concept_id: str) -> Optional[int]:
        """ConceptIndex.position_of over the concepts of both."""
        found = self.main.position_of(concept_id)
        return found if found is not None else self.added_position(concept_id)

    def added_position(self, concept_id: str) -> Optional[int]:
        """The position of a concept only the supplement holds, None for any other id."""
        found = self.supplement.concept_ids.position(concept_id)
        if found is None or self._position[found] < self._n_main:
            return None
        return int(self._position[found])

    def added_concept(self, concept_id: str) -> Concept:
        """A concept only the supplement holds, named by its rows."""
        position = self.added_position(concept_id)
        if position is None:
            raise KeyError(concept_id)
        if getattr(self, "_rows_of", None) is None:  # each added concept's rows, in row order
            added = self.row_concepts[len(self.main):]
            order = np.argsort(added, kind="stable")
            self._rows_of = (order, added[order])
        order, sorted_concepts = self._rows_of
        first, last = np.searchsorted(sorted_concepts, [position, position + 1])
        names = self.names.take(order[first:last])
        return Concept(concept_id, names[0], names[1:], list(self.concept_types(position)))

    def canonical_name(self, concept_id: str) -> Optional[str]:
        """ConceptIndex.canonical_name, then a concept only the supplement holds: its first name."""
        found = self.main.canonical_name(concept_id)
        if found is None and self.added_position(concept_id) is not None:
            return self.added_concept(concept_id).canonical_name
        return found

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """ConceptIndex.resolve_id, then the ids only the supplement holds (it keeps no other ids)."""
        return self.main.resolve_id(concept_id) or (concept_id if self.added_position(concept_id) is not None else None)

    def hybrid_names(self) -> Tuple[ConceptIndex, Callable[[np.ndarray], List[str]]]:
        """For the hybrid score: the index whose names fit the tf-idf (the main one), and the
        names of supplement rows (numbered after the main index's), transformed when hit."""
        return self.main, lambda rows: self.names.take(np.asarray(rows) - len(self.main))

    def save(self, path: Union[str, Path], compress_kb: bool = False, graph: bool = False) -> Path:
        path = self.main.save(path, compress_kb=compress_kb, graph=graph)
        shutil.copytree(self.supplement.path, Path(path) / SUPPLEMENT_DIR, dirs_exist_ok=True)
        return path

    def __repr__(self) -> str:
        return f"SupplementedIndex({self.main!r}, {len(self.supplement)} more names)"


class _AddedConcepts(Mapping):
    """The concepts only a supplement holds, by id, each made when looked up."""

    def __init__(self, index: SupplementedIndex):
        self._index = index

    def __getitem__(self, concept_id: str) -> Concept:
        return self._index.added_concept(concept_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.concept_ids[self._index._n_main:])

    def __len__(self) -> int:
        return len(self._index.concept_ids) - self._index._n_main


class SupplementedKB:
    """The KB of an index with a supplement, as the linker shows it (`linker.kb`): the main
    index's KB, then the supplement's added concepts, made when looked up, so that
    `cui_to_entity[cui]` costs no 253k concepts up front. What else a KnowledgeBase offers
    (`alias_to_cuis`, …) is read from both merged, made when first asked for."""

    def __init__(self, index: SupplementedIndex):
        self._index = index
        self.name, self.version = index.main.kb.name, index.main.kb.version
        self.cui_to_entity = ChainMap(index.main.kb.cui_to_entity, _AddedConcepts(index))
        self._merged: Optional[KnowledgeBase] = None

    def resolve_id(self, concept_id: str) -> Optional[str]:
        return self._index.resolve_id(concept_id)

    def __len__(self) -> int:
        return len(self.cui_to_entity)

    def __iter__(self) -> Iterator[Concept]:
        return (self.cui_to_entity[cui] for cui in self._index.concept_ids)

    def __contains__(self, concept_id: str) -> bool:
        return concept_id in self.cui_to_entity

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._merged is None:
            self._merged = KnowledgeBase(iter(self), name=self.name, version=self.version)
        return getattr(self._merged, name)


def supplement_concepts(folder: Path, known: Container[str] = ()) -> List[Concept]:
    """The concepts a supplement folder holds that `known` (ids) lacks, each named by its rows (its
    first name canonical), without its codes: what a names table's ids are checked against."""
    stored = json.loads((Path(folder) / CONCEPTS_FILE).read_text(encoding="utf-8"))
    types = stored_type_sets(stored)
    rows = np.load(Path(folder) / ROWS_FILE)
    names = RowNames(Path(folder) / NAMES_FILE)
    by_concept: dict = {}
    for row, position in enumerate(rows.tolist()):
        by_concept.setdefault(position, []).append(row)
    concepts = []
    ids = stored["concept_ids"] if "concept_ids" in stored else PackedIds.from_encoded(np.load(Path(folder) / IDS_FILE))
    for position, concept_id in enumerate(ids):
        if concept_id in known or position not in by_concept:
            continue
        bearing = names.take(by_concept[position])
        concepts.append(Concept(concept_id, bearing[0], bearing[1:], list(types[position])))
    return concepts


def with_supplement(index: ConceptIndex, folder: Optional[Path], encoder=None):
    """`index` with the supplement `folder` holds (a SupplementedIndex), or `index` itself
    when `folder` is None or holds none."""
    if folder is None or not (Path(folder) / SUPPLEMENT_DIR / META_FILE).is_file():
        return index
    return SupplementedIndex(index, ConceptIndex.load(Path(folder) / SUPPLEMENT_DIR, encoder=encoder))
