"""BioSyn's hybrid score: dense search hits rescored with the char 3-gram tf-idf cosine of the
mention and the hit's name."""
import json
import logging
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from ..search.index import ConceptIndex

logger = logging.getLogger(__name__)

# Name rows the dense search proposes for the hybrid score to rank. Adding the sparse side's own
# top 64 rows changed no Acc@1 on NCBI, BC5CDR-disease or CADEC dev (trained hybrid model).
HYBRID_ROWS = 64
# Bump when the features or their files change, so cached hybrid states (HybridRescorer.for_index)
# are refitted.
HYBRID_STATE_VERSION = 5
# What HybridRescorer.save writes (its record, cache.write_record, lists them): NameCounts' arrays, memory-mapped.
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


def fit_char_tfidf(names: Sequence[str]) -> Tuple[Dict[str, int], np.ndarray, "SparseRows"]:
    """(vocabulary, idf, unit name vectors) of `names`, bit for bit what scikit-learn's
    TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), dtype=float32) fits (version 1.9:
    its arithmetic and its order of stored entries, which the sums of the hybrid score follow),
    so that first use needs no scikit-learn (tests/runtime/test_hybrid.py holds it to the original)."""
    vocabulary, idf, counts = fit_char_counts(names)
    return vocabulary, idf, counts.vectors(slice(None))


class SparseRows:
    """Rows of sparse vectors in CSR form (scipy's names: data, indices, indptr), as the hybrid
    score needs them and no more, so that linking needs no scipy: rows are taken (`rows[[2, 0]]`,
    each row's stored order kept) and paired (`_products`)."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, width: int):
        self.data, self.indices, self.indptr, self.width = data, indices, indptr, int(width)

    @property
    def shape(self) -> Tuple[int, int]:
        return len(self.indptr) - 1, self.width

    def __getitem__(self, rows) -> "SparseRows":
        entries, lengths = _row_entries(self.indptr, np.asarray(rows, dtype=np.int64))
        pointers = np.concatenate([[0], np.cumsum(lengths)]).astype(self.indptr.dtype)
        return SparseRows(self.data[entries], self.indices[entries], pointers, self.width)

    def toarray(self) -> np.ndarray:
        """The rows as a dense array."""
        dense = np.zeros(self.shape, dtype=self.data.dtype)
        dense[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.indices] = self.data
        return dense


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

    def vectors(self, rows) -> SparseRows:
        """The unit tf-idf vectors of `rows` (an array of row numbers, or a slice), in the stored
        order: counts × idf in float32, divided in float64 by the row's norm (1 where it is 0).
        Only the rows' entries are read (the arrays may be memory-mapped)."""
        rows = np.arange(len(self.norms))[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        entries, lengths = _row_entries(self.pointers, rows)
        columns = self.columns[entries].astype(np.int32)
        data = self.counts[entries].astype(np.float32) * self.idf[columns]
        norms = self.norms[rows]
        divisor = np.repeat(np.where(norms == 0.0, 1.0, norms), lengths)
        pointers = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return SparseRows((data.astype(np.float64) / divisor).astype(np.float32), columns, pointers, len(self.idf))


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
    word_ids, occurrences, owners = _words(names)
    if not word_ids:
        return {}, *(np.zeros(0, dtype=np.int64) for _ in range(3))
    grams, lengths = _word_grams(word_ids)
    distinct, first, column = np.unique(grams, return_index=True, return_inverse=True)
    met = np.empty(len(distinct), dtype=np.int64)  # each n-gram's number in the order first met
    met[np.argsort(first, kind="stable")] = np.arange(len(distinct))
    # Every word of every name, as its n-grams' numbers.
    gram_rows, word_grams = _occurring_grams(occurrences, owners, lengths)
    entries, counts = _counted(gram_rows * len(distinct) + met[column.ravel()][word_grams])
    rows, met_columns = np.divmod(entries, len(distinct))
    by_met = np.empty(len(distinct), dtype=np.int64)
    by_met[met] = np.arange(len(distinct))
    packed = distinct.astype(np.int64)
    code = (1 << 21) - 1
    vocabulary = {chr(a) + chr(b) + chr(c): i for i, (a, b, c) in enumerate(zip(
        (packed >> 42).tolist(), ((packed >> 21) & code).tolist(), (packed & code).tolist()))}
    return vocabulary, rows, by_met[met_columns], counts


def _words(texts: Sequence[str]) -> Tuple[Dict[str, int], List[int], List[int]]:
    """Each distinct lower-cased word of `texts` numbered as first met, every word's number in
    order, and the text each comes from (char_wb's words: str.lower, then str.split)."""
    word_ids: Dict[str, int] = {}
    occurrences: List[int] = []
    owners: List[int] = []
    for row, text in enumerate(texts):
        split = text.lower().split()
        occurrences += [word_ids.setdefault(word, len(word_ids)) for word in split]
        owners += [row] * len(split)
    return word_ids, occurrences, owners


def _word_grams(words: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """The char_wb 3-grams of each word, one word after another, each as its three code points
    packed in 63 bits (`_packed`: sorting the numbers sorts the strings), and each word's count.
    A word padded with a space on either side is never shorter than 3: its n-grams start at its
    first len(word) positions."""
    padded = "".join(f" {word} " for word in words).encode("utf-32-le", "surrogatepass")
    points = np.frombuffer(padded, dtype=np.uint32)
    lengths = np.fromiter((len(word) for word in words), dtype=np.int64, count=len(words))
    starts = _ragged(np.concatenate([[0], np.cumsum(lengths + 2)[:-1]]), lengths)
    return _packed(points[starts], points[starts + 1], points[starts + 2]), lengths


def _packed(first: np.ndarray, second: np.ndarray, third: np.ndarray) -> np.ndarray:
    """Three code points in one number, 21 bits each."""
    return ((first.astype(np.uint64) << np.uint64(42)) | (second.astype(np.uint64) << np.uint64(21))
            | third.astype(np.uint64))


def _occurring_grams(occurrences: List[int], owners: List[int], lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """For every n-gram of every word as it occurs: its text's row, and its place among
    `_word_grams`' n-grams."""
    words = np.asarray(occurrences, dtype=np.int64)
    places = _ragged(np.concatenate([[0], np.cumsum(lengths)[:-1]])[words], lengths[words])
    return np.repeat(np.asarray(owners, dtype=np.int64), lengths[words]), places


def _counted(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_counts=True), the same arrays, by a stable sort: keys made row by
    row are ordered by row, shuffled only within it, which numpy's stable sort (timsort for
    int64) sorts in a tenth of the time np.unique's sort takes (0.07 against 0.56 s for the
    bundled index's 5.4M n-grams)."""
    ordered = np.sort(keys, kind="stable")
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(ordered) else ordered
    return ordered[starts], np.diff(np.append(starts, len(ordered)))


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
            from ..cache import recorded_intact

            if not recorded_intact(state, STATE_FILES):
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
    def name_vectors(self) -> SparseRows:
        """Every fitted name's unit tf-idf vector (fit_char_tfidf's), made when asked."""
        return self.names.vectors(slice(None))

    def save(self, folder: Path) -> None:
        """Write the fitted state (vocabulary, idf, NameCounts) for HybridRescorer(None, w, folder)."""
        (folder / "vocabulary.json").write_text(json.dumps(self.vocabulary, ensure_ascii=False), encoding="utf-8")
        np.save(folder / "idf.npy", self.idf)
        for part, array in self.names.arrays().items():
            np.save(folder / f"{part}.npy", array)
        from ..cache import write_record

        write_record(folder, STATE_FILES)

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
                     takes="about 2 s for the bundled index", seconds=2)
        return loaded[-1]

    def transform(self, texts: Sequence[str]) -> SparseRows:
        """Unit tf-idf vectors of `texts` (n-grams the names lack are dropped), as scikit-learn's
        fitted TfidfVectorizer gives them. Bit for bit, stored order included, what this gave when
        it was scipy's products (counts × idf, divided by the row norms), in a quarter of the time
        for one document's mentions; the order matters to the sums of `rescore`."""
        width = len(self.vocabulary)
        unique, counts = _counted(self._gram_keys(texts))
        rows, columns = np.divmod(unique, width) if width else (unique, unique)
        weighted = counts.astype(np.float32) * self.idf[columns]
        starts = np.searchsorted(rows, np.arange(len(texts) + 1))
        norms = np.sqrt(_row_sums(weighted * weighted, starts))
        data = (1 / np.where(norms > 0, norms, 1))[rows] * weighted
        # Columns descending in each row, as scipy's diagonal product stored them: the sums of
        # `rescore` follow this order.
        order = np.lexsort((-columns, rows))
        return SparseRows(data[order], columns[order].astype(np.int32), starts.astype(np.int32), width)

    TRANSFORM_IN_NUMPY = 8  # texts from which `_gram_keys` finds their n-grams in numpy (the faster from 8)

    def _gram_keys(self, texts: Sequence[str]) -> np.ndarray:
        """row × width + column of each n-gram of each text (char_wb_ngrams) that the vocabulary
        holds, once per occurrence, in no particular order. From TRANSFORM_IN_NUMPY texts (a
        batch's mentions, a supplement's 16 hit names a query) each distinct word's n-grams are
        made in numpy and looked up among the vocabulary's packed n-grams, the same keys: 16 texts
        104 -> 62 µs, 700 texts 9.5 -> 2.4 ms; fewer texts take the loop (2 texts 15 µs, 38 in numpy)."""
        vocabulary = self.vocabulary
        width = len(vocabulary)
        if len(texts) < self.TRANSFORM_IN_NUMPY or not width:
            keys: List[int] = []
            for row, text in enumerate(texts):
                keys += [row * width + vocabulary[g] for g in char_wb_ngrams(text) if g in vocabulary]
            return np.asarray(keys, dtype=np.int64)
        word_ids, occurrences, owners = _words(texts)
        if not word_ids:
            return np.zeros(0, dtype=np.int64)
        grams, lengths = _word_grams(word_ids)
        codes, columns = self._vocabulary_codes()
        at = np.minimum(np.searchsorted(codes, grams), len(codes) - 1)
        gram_columns = np.where(codes[at] == grams, columns[at], -1)
        rows, places = _occurring_grams(occurrences, owners, lengths)
        found = gram_columns[places]
        kept = found >= 0
        return rows[kept] * width + found[kept]

    def _vocabulary_codes(self) -> Tuple[np.ndarray, np.ndarray]:
        """The vocabulary's n-grams packed as `_word_grams` packs them, sorted, and their columns."""
        if getattr(self, "_codes", None) is None:
            grams = list(self.vocabulary)
            points = np.frombuffer("".join(grams).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).reshape(-1, 3)
            codes = _packed(points[:, 0], points[:, 1], points[:, 2])
            order = np.argsort(codes, kind="stable")
            columns = np.fromiter(self.vocabulary.values(), dtype=np.int64, count=len(grams))
            self._codes = (codes[order], columns[order])
        return self._codes

    def for_texts(self, texts: Sequence[str]) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The `rescore` of ConceptIndex.search for queries embedding `texts`, in order."""
        queries = _Paired(self.transform(list(texts)))

        def rescore(positions: np.ndarray, rows: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            """positions: the block's queries (into `texts`); rows, cosines: (n, r) hits."""
            hit = rows >= 0
            flat = np.where(hit, rows, 0).ravel()
            mentions = np.repeat(np.asarray(positions), rows.shape[1])
            fitted = flat < self.names.shape[0]
            if fitted.all():
                sparse = self._in_parts(queries, flat, mentions, self.names.vectors)
            else:  # rows beyond the fitted names (a supplement's): their names transformed now
                sparse = np.zeros(len(flat), dtype=np.float32)
                sparse[fitted] = self._in_parts(queries, flat[fitted], mentions[fitted], self.names.vectors)
                sparse[~fitted] = self._in_parts(queries, flat[~fitted], mentions[~fitted],
                                                 lambda rows: self.transform(self.more_names(rows)))
            sparse = sparse.reshape(rows.shape)
            return np.where(hit, (cosines + self.weight * sparse) / (1 + self.weight), -np.inf).astype(np.float32)

        return rescore

    PART_ROWS = 4096

    def _in_parts(self, queries: "_Paired", rows: np.ndarray, mentions: np.ndarray,
                  vectors: Callable[[np.ndarray], "SparseRows"]) -> np.ndarray:
        """queries.products of the names of `rows` (made by `vectors`) with `mentions`, in parts
        of PART_ROWS rows, so that a large batch's hits do not hold their vectors all at once
        (30 MB at the peak of a batch of 256 abstracts). Each row's sum runs in the order the
        whole call would give it: where some mention is stored backwards, every part's is."""
        if len(rows) <= self.PART_ROWS or not queries.backwards_for(mentions):
            return queries.products(vectors(rows), mentions)
        parts = [queries.products(vectors(rows[i : i + self.PART_ROWS]), mentions[i : i + self.PART_ROWS],
                                  backwards=True) for i in range(0, len(rows), self.PART_ROWS)]
        return np.concatenate(parts)


def _products(names: SparseRows, mentions: SparseRows) -> np.ndarray:
    """Each row's tf-idf cosine of name and mention (rows paired), as `_Paired.products` gives it."""
    return _Paired(mentions).products(names, np.arange(mentions.shape[0]))


class _Paired:
    """Mentions' tf-idf vectors, to pair with name rows: each name row's cosine with its mention's
    vector is the sum of the products of the columns both hold, bit for bit as scipy's
    names.multiply(mentions[rows]).sum(axis=1) summed them (tests/runtime/test_hybrid.py holds it
    to scipy). scipy sums a row's nonzero products (`_row_sums`) in the order its element-wise
    product left them: ascending columns where both matrices store every row's columns ascending,
    else the name row's stored order reversed (its general product links a row's columns head
    first). The mentions' values are looked up in a dense table of the mentions asked × the
    columns they hold, a few MB, built per call (TABLE_CELLS bounds it; more mentions take turns)."""

    TABLE_CELLS = 1 << 21

    def __init__(self, mentions: SparseRows):
        self.mentions = mentions
        self.ascending = _ascending_rows(mentions, _row_numbers(mentions))

    def backwards_for(self, mentions: np.ndarray) -> bool:
        """Whether products sums every row backwards for these mentions, whatever the names
        (some mention's columns are not stored ascending)."""
        return not self.ascending[np.asarray(mentions, dtype=np.int64)].all()

    def products(self, names: SparseRows, mentions: np.ndarray, backwards: Optional[bool] = None) -> np.ndarray:
        """The cosine of each name row with the vector of its mention (`mentions`, one a row).
        backwards: the order of each row's sum, as worked out for a larger call (None: this one's)."""
        mentions = np.asarray(mentions, dtype=np.int64)
        asked, local = np.unique(mentions, return_inverse=True)  # each name row's mention, as numbered here
        spans, lengths = _row_entries(self.mentions.indptr, asked)
        columns, slots = np.unique(self.mentions.indices[spans], return_inverse=True)
        # Each column's place in the table; columns no mention holds read its last column, of zeros.
        slot = np.full(max(self.mentions.width, 1), len(columns), dtype=np.int32)
        slot[columns] = np.arange(len(columns), dtype=np.int32)
        width = len(columns) + 1
        owners = np.repeat(np.arange(len(asked)), lengths)
        row_lengths = np.diff(names.indptr)
        name_slots = slot[names.indices]
        values = np.empty(len(names.data), dtype=np.float32)
        turn = max(1, self.TABLE_CELLS // width)
        for first in range(0, len(asked), turn):  # mentions in turns, each turn's table a few MB
            table = np.zeros((min(turn, len(asked) - first), width), dtype=np.float32)
            mine = slice(*np.searchsorted(owners, [first, first + len(table)]))
            table[owners[mine] - first, slots.ravel()[mine]] = self.mentions.data[spans[mine]]
            if len(table) == len(asked):  # one turn: every row's
                values = table.ravel()[np.repeat((local * width).astype(np.int32), row_lengths) + name_slots]
                break
            in_turn = (local >= first) & (local < first + len(table))
            entries = np.repeat(in_turn, row_lengths)
            offsets = np.repeat((np.where(in_turn, local - first, 0) * width).astype(np.int32), row_lengths)
            values[entries] = table.ravel()[(offsets + name_slots)[entries]]
        products = names.data * values
        if backwards is None:
            backwards = self.backwards_for(mentions) or not _ascending_rows(names, _row_numbers(names)).all()
        if backwards:  # each row's products reversed (and the rows too: one sum a row either way)
            products, row_lengths = products[::-1], row_lengths[::-1]
        # Only the nonzero products are summed, as scipy stores them: each row's start among them.
        nonzero = products != 0
        starts = np.concatenate([[0], np.cumsum(nonzero)])[np.concatenate([[0], np.cumsum(row_lengths)])]
        sums = _row_sums(products[nonzero], starts)
        return sums[::-1].copy() if backwards else sums


def _row_entries(pointers: np.ndarray, rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The stored entries of `rows` (CSR `pointers`), one row after another, and each row's length."""
    starts = np.asarray(pointers[rows], dtype=np.int64)
    lengths = np.asarray(pointers[rows + 1], dtype=np.int64) - starts
    return _ragged(starts, lengths), lengths


def _row_numbers(rows: SparseRows) -> np.ndarray:
    """The row of each stored entry."""
    return np.repeat(np.arange(rows.shape[0], dtype=np.int64), np.diff(rows.indptr))


def _ascending_rows(rows: SparseRows, numbers: np.ndarray) -> np.ndarray:
    """Whether each row stores its columns strictly ascending (scipy's canonical format)."""
    ascending = np.ones(rows.shape[0], dtype=bool)
    steps = np.diff(rows.indices.astype(np.int64))
    within = numbers[1:] == numbers[:-1]
    ascending[numbers[1:][within & (steps <= 0)]] = False
    return ascending


def _row_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sum of each row's `values` (rows start at starts[i], the last ends at starts[-1]), as
    scipy sums a CSR matrix's rows (np.add.reduceat over the non-empty ones), so that transform
    gives what scipy's products gave before, bit for bit."""
    sums = np.zeros(len(starts) - 1, dtype=values.dtype if len(values) else np.float32)
    nonempty = np.flatnonzero(np.diff(starts))
    if len(nonempty):
        sums[nonempty] = np.add.reduceat(values, starts[nonempty])
    return sums
