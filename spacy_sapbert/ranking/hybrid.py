"""BioSyn's hybrid score: dense search hits rescored with the char 3-gram tf-idf cosine of the
mention and the hit's name."""
import json
import logging
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse

if TYPE_CHECKING:
    from ..search.index import ConceptIndex

logger = logging.getLogger(__name__)

# Name rows the dense search proposes for the hybrid score to rank. Adding the sparse side's own
# top 64 rows changed no Acc@1 on NCBI, BC5CDR-disease or CADEC dev (trained hybrid model).
HYBRID_ROWS = 64
# Bump when the features or their files change, so cached hybrid states (HybridRescorer.for_index)
# are refitted.
HYBRID_STATE_VERSION = 5
# What HybridRescorer.save writes (files.json records them): NameCounts' arrays, memory-mapped.
STATE_FILES = ("vocabulary.json", "idf.npy", "counts.npy", "columns.npy", "pointers.npy", "norms.npy")


def char_wb_ngrams(text: str, n: int = 3) -> List[str]:
    """scikit-learn's char_wb analyzer for one n (lower-cased; each word padded with a space on
    either side; a word shorter than n counts once): HybridRescorer transforms mentions with it,
    so that linking needs no scikit-learn (tests/runtime/test_hybrid.py holds it to the original)."""
    grams: List[str] = []
    for word in text.lower().split():
        word = f" {word} "
        grams.extend(word[i : i + n] for i in range(max(1, len(word) - n + 1)))
    return grams


def fit_char_tfidf(names: Sequence[str]) -> Tuple[Dict[str, int], np.ndarray, scipy.sparse.csr_matrix]:
    """(vocabulary, idf, unit name vectors) of `names`, bit for bit what scikit-learn's
    TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), dtype=float32) fits (version 1.9:
    its arithmetic and its order of stored entries, which the sums of the hybrid score follow),
    so that first use needs no scikit-learn (tests/runtime/test_hybrid.py holds it to the original)."""
    vocabulary, idf, counts = fit_char_counts(names)
    return vocabulary, idf, counts.vectors(slice(None))


class NameCounts:
    """The names' n-gram counts in CSR form (a byte a count and two a column where the counts and
    the vocabulary allow) with each row's tf-idf norm: the unit tf-idf vectors of any rows, made
    when asked (`vectors`), are bit for bit those fit_char_tfidf stores, in less than half the
    memory (18 MB for the bundled index's 208k names, where the float32 vectors took 43)."""

    ARRAYS = ("counts", "columns", "pointers", "norms")

    def __init__(self, counts: np.ndarray, columns: np.ndarray, pointers: np.ndarray, norms: np.ndarray,
                 idf: np.ndarray):
        if not (len(counts) == len(columns) == int(pointers[-1]) and len(pointers) == len(norms) + 1):
            raise ValueError("name counts, columns, pointers and norms disagree")
        self.counts, self.columns, self.pointers = counts, columns, pointers
        self.idf, self.norms = idf, norms

    def arrays(self) -> Dict[str, np.ndarray]:
        """The arrays HybridRescorer.save writes, by their names in ARRAYS."""
        return {"counts": self.counts, "columns": self.columns, "pointers": self.pointers, "norms": self.norms}

    @property
    def shape(self) -> Tuple[int, int]:
        return len(self.norms), len(self.idf)

    def vectors(self, rows) -> scipy.sparse.csr_matrix:
        """The unit tf-idf vectors of `rows` (an array of row numbers, or a slice), in the stored
        order: counts × idf in float32, divided in float64 by the row's norm (1 where it is 0).
        Only the rows' entries are read (the arrays may be memory-mapped)."""
        rows = np.arange(len(self.norms))[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        starts = np.asarray(self.pointers[rows], dtype=np.int64)
        lengths = np.asarray(self.pointers[rows + 1], dtype=np.int64) - starts
        entries = _ragged(starts, lengths)
        columns = self.columns[entries].astype(np.int32)
        data = self.counts[entries].astype(np.float32) * self.idf[columns]
        norms = self.norms[rows]
        divisor = np.repeat(np.where(norms == 0.0, 1.0, norms), lengths)
        pointers = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return scipy.sparse.csr_matrix(((data.astype(np.float64) / divisor).astype(np.float32), columns, pointers),
                                       shape=(len(rows), len(self.idf)))


def fit_char_counts(names: Sequence[str]) -> Tuple[Dict[str, int], np.ndarray, NameCounts]:
    """(vocabulary, idf, the names' NameCounts), as fit_char_tfidf fits them.

    The n-grams are numbered as first met, each name's counted in that order, then renumbered
    in sorted order; idf = ln((1 + n) / (1 + df)) + 1 in float32; each row is divided by the
    square root of its float32 squares summed in float64, in stored order."""
    vocabulary, rows, columns, counts_array = _count_grams(names)
    pointers = np.searchsorted(rows, np.arange(len(names) + 1)).astype(np.int32)
    df = np.bincount(columns, minlength=len(vocabulary)).astype(np.float32)
    df += np.float32(1.0)
    idf = np.full_like(df, len(pointers), dtype=np.float32)  # n + 1 names, smoothed
    idf /= df
    np.log(idf, out=idf)
    idf += np.float32(1.0)
    data = counts_array.astype(np.float32) * idf[columns]
    squares = (data * data).astype(np.float64)
    lengths = np.diff(pointers)
    sums = np.zeros(len(lengths), dtype=np.float64)
    for offset in range(int(lengths.max()) if len(lengths) else 0):  # row by row in stored order
        rows = np.flatnonzero(lengths > offset)
        sums[rows] += squares[pointers[rows] + offset]
    count_type = np.uint8 if counts_array.max(initial=0) <= np.iinfo(np.uint8).max else np.int32
    column_type = np.uint16 if len(vocabulary) <= np.iinfo(np.uint16).max + 1 else np.int32
    return vocabulary, idf, NameCounts(counts_array.astype(count_type), columns.astype(column_type), pointers,
                                       np.sqrt(sums), idf)


def _count_grams(names: Sequence[str]) -> Tuple[Dict[str, int], np.ndarray, np.ndarray, np.ndarray]:
    """(vocabulary, and each stored entry's row, column and count) of the names' char_wb 3-grams,
    in scikit-learn's stored order: a row's n-grams by the order the whole list first met them,
    numbered as sorted; the same arrays as counting name by name, in less than half the time
    (1.0 s against 2.4 for the bundled index's 208k names). Each distinct word's n-grams are made once, in numpy,
    from its code points (three packed in 63 bits: sorting the numbers sorts the strings); taken
    in order of the words' first appearance, they are first met in the order the whole list
    first meets them."""
    word_ids: Dict[str, int] = {}
    occurrences: List[int] = []
    owners: List[int] = []
    for row, name in enumerate(names):
        split = name.lower().split()
        occurrences += [word_ids.setdefault(word, len(word_ids)) for word in split]
        owners += [row] * len(split)
    if not word_ids:
        return {}, *(np.zeros(0, dtype=np.int64) for _ in range(3))
    # Each word padded with a space on either side (never shorter than 3): its n-grams start at
    # its first len(word) positions.
    padded = "".join(f" {word} " for word in word_ids).encode("utf-32-le", "surrogatepass")
    points = np.frombuffer(padded, dtype=np.uint32)
    lengths = np.fromiter((len(word) for word in word_ids), dtype=np.int64, count=len(word_ids))
    starts = _ragged(np.concatenate([[0], np.cumsum(lengths + 2)[:-1]]), lengths)
    grams = ((points[starts].astype(np.uint64) << np.uint64(42)) | (points[starts + 1].astype(np.uint64) << np.uint64(21))
             | points[starts + 2].astype(np.uint64))
    distinct, first, column = np.unique(grams, return_index=True, return_inverse=True)
    met = np.empty(len(distinct), dtype=np.int64)  # each n-gram's number in the order first met
    met[np.argsort(first, kind="stable")] = np.arange(len(distinct))
    # Every word of every name, as its n-grams' numbers.
    words = np.asarray(occurrences, dtype=np.int64)
    word_grams = _ragged(np.concatenate([[0], np.cumsum(lengths)[:-1]])[words], lengths[words])
    gram_rows = np.repeat(np.asarray(owners, dtype=np.int64), lengths[words])
    entries, counts = np.unique(gram_rows * len(distinct) + met[column.ravel()[word_grams]], return_counts=True)
    rows, met_columns = np.divmod(entries, len(distinct))
    by_met = np.empty(len(distinct), dtype=np.int64)
    by_met[met] = np.arange(len(distinct))
    packed = distinct.astype(np.int64)
    code = (1 << 21) - 1
    vocabulary = {chr(a) + chr(b) + chr(c): i for i, (a, b, c) in enumerate(zip(
        (packed >> 42).tolist(), ((packed >> 21) & code).tolist(), (packed & code).tolist()))}
    return vocabulary, rows, by_met[met_columns], counts


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[0], starts[0] + 1, …, starts[0] + lengths[0] - 1, starts[1], …: the positions of
    ragged runs, one after another."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends) else 0)


class HybridRescorer:
    """BioSyn's hybrid score for dense search hits: cosine + weight × the char 3-gram tf-idf
    cosine of the mention and the hit's name (the idf fitted on the names), divided by
    1 + weight so that scores stay on the cosine's scale (1 for an exact name) and `threshold`
    keeps its meaning; the order is BioSyn's.

    names: each index row's name (ConceptIndex.row_names), fitted as scikit-learn would
    (fit_char_tfidf); or `state`,
    a folder `save` wrote (for_index caches one per index). weight: the sparse weight a model
    was trained with (its "sparse" settings section).
    """

    rows = HYBRID_ROWS  # name rows the dense search fetches for it at least
    # The names of rows beyond those fitted (a supplement's, search.supplement), given their
    # row numbers: transformed with the fitted vocabulary and idf when a search hits them.
    more_names: Optional[Callable[[np.ndarray], List[str]]] = None

    def __init__(self, names: Optional[Sequence[str]], weight: float, state: Optional[Path] = None):
        self.weight = float(weight)
        if state is not None:
            from ..cache import damaged_record

            recorded = json.loads((state / "files.json").read_text(encoding="utf-8"))
            if set(recorded) != set(STATE_FILES) or damaged_record(state, recorded):
                raise ValueError(f"a file of {state} does not match its checksum")
            self.vocabulary: Dict[str, int] = json.loads((state / "vocabulary.json").read_text(encoding="utf-8"))
            self.idf = np.load(state / "idf.npy")
            # Memory-mapped: only the pages of names a search hits become resident, and processes
            # that map the same state (forked workers, other pipelines) share them.
            arrays = [np.load(state / f"{part}.npy", mmap_mode="r") for part in NameCounts.ARRAYS]
            self.names = NameCounts(*arrays, idf=self.idf)
            if len(self.vocabulary) != len(self.idf):
                raise ValueError(f"{state} holds name vectors of another vocabulary")
            return
        self.vocabulary, self.idf, self.names = fit_char_counts(list(names))

    @property
    def name_vectors(self) -> scipy.sparse.csr_matrix:
        """Every fitted name's unit tf-idf vector (fit_char_tfidf's), made when asked."""
        return self.names.vectors(slice(None))

    def save(self, folder: Path) -> None:
        """Write the fitted state (vocabulary, idf, NameCounts) for HybridRescorer(None, w, folder)."""
        (folder / "vocabulary.json").write_text(json.dumps(self.vocabulary, ensure_ascii=False), encoding="utf-8")
        np.save(folder / "idf.npy", self.idf)
        for part, array in self.names.arrays().items():
            np.save(folder / f"{part}.npy", array)
        from ..cache import file_records

        (folder / "files.json").write_text(json.dumps(file_records(folder, STATE_FILES), indent=2))

    @classmethod
    def for_index(cls, index: "ConceptIndex", weight: float, cache: Optional[Path] = None) -> "HybridRescorer":
        """The rescorer of `index`'s row names. With `cache` (a folder) and an index saved with
        checksums, the fitted state is kept there, keyed by the KB's and rows' checksums, so a
        later load skips the names and the fitting (2 s and 140 MB at peak for the bundled
        index's 208k names); an unreadable state is fitted and written again."""
        key = index.state_key(HYBRID_STATE_VERSION)
        if cache is None or key is None:
            return cls(index.row_names(), weight)
        folder = cache / f"hybrid-{key}"
        loaded: List["HybridRescorer"] = []

        def intact(path: Path) -> bool:
            if not loaded and path.exists():
                try:
                    loaded.append(cls(None, weight, state=path))
                except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
                    return False
            return bool(loaded)

        def fit(staging: Path) -> None:
            loaded.append(cls(index.row_names(), weight))
            loaded[-1].save(staging)

        from ..cache import cached_build

        cached_build(folder, fit, intact, "hybrid score's char n-gram tf-idf of the names",
                     takes="about a second for the bundled index", seconds=1)
        return loaded[-1]

    def transform(self, texts: Sequence[str]) -> scipy.sparse.csr_matrix:
        """Unit tf-idf vectors of `texts` (n-grams the names lack are dropped), as scikit-learn's
        fitted TfidfVectorizer gives them. Bit for bit, stored order included, what this gave when
        it was scipy's products (counts × idf, divided by the row norms), in a quarter of the time
        for one document's mentions; the order matters to the sums of `rescore`."""
        vocabulary = self.vocabulary
        keys: List[int] = []
        width = len(vocabulary)
        for row, text in enumerate(texts):
            keys += [row * width + vocabulary[g] for g in char_wb_ngrams(text) if g in vocabulary]
        unique, counts = np.unique(np.asarray(keys, dtype=np.int64), return_counts=True)
        rows, columns = np.divmod(unique, width) if width else (unique, unique)
        weighted = counts.astype(np.float32) * self.idf[columns]
        starts = np.searchsorted(rows, np.arange(len(texts) + 1))
        norms = np.sqrt(_row_sums(weighted * weighted, starts))
        data = (1 / np.where(norms > 0, norms, 1))[rows] * weighted
        # Columns descending in each row, as scipy's diagonal product stored them: the sums of
        # `rescore` follow this order.
        order = np.lexsort((-columns, rows))
        return scipy.sparse.csr_matrix((data[order], columns[order].astype(np.int32), starts.astype(np.int32)),
                                       shape=(len(texts), width))

    def for_texts(self, texts: Sequence[str]) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The `rescore` of ConceptIndex.search for queries embedding `texts`, in order."""
        queries = self.transform(list(texts))

        def rescore(positions: np.ndarray, rows: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            """positions: the block's queries (into `texts`); rows, cosines: (n, r) hits."""
            hit = rows >= 0
            flat = np.where(hit, rows, 0).ravel()
            mentions = np.repeat(np.asarray(positions), rows.shape[1])
            fitted = flat < self.names.shape[0]
            if fitted.all():
                sparse = _products(self.names.vectors(flat), queries[mentions])
            else:  # rows beyond the fitted names (a supplement's): their names transformed now
                sparse = np.zeros(len(flat), dtype=np.float32)
                sparse[fitted] = _products(self.names.vectors(flat[fitted]), queries[mentions[fitted]])
                sparse[~fitted] = _products(self.transform(self.more_names(flat[~fitted])), queries[mentions[~fitted]])
            sparse = sparse.reshape(rows.shape)
            return np.where(hit, (cosines + self.weight * sparse) / (1 + self.weight), -np.inf).astype(np.float32)

        return rescore


def _products(names: scipy.sparse.csr_matrix, mentions: scipy.sparse.csr_matrix) -> np.ndarray:
    """Each row's tf-idf cosine of name and mention (rows paired)."""
    return np.asarray(names.multiply(mentions).sum(axis=1), dtype=np.float32).ravel()


def _row_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sum of each row's `values` (rows start at starts[i], the last ends at starts[-1]), as
    scipy sums a CSR matrix's rows (np.add.reduceat over the non-empty ones), so that transform
    gives what scipy's products gave before, bit for bit."""
    sums = np.zeros(len(starts) - 1, dtype=values.dtype if len(values) else np.float32)
    nonempty = np.flatnonzero(np.diff(starts))
    if len(nonempty):
        sums[nonempty] = np.add.reduceat(values, starts[nonempty])
    return sums
