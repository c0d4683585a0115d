"""Character n-gram tf-idf over concept names: search (scispaCy's candidate-generator algorithm,
searched exactly instead of through an approximate nmslib index), and BioSyn's hybrid score
for dense search hits."""
import json
import logging
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

import numpy as np
import scipy.sparse

from .ranking import Candidates, best_concepts

if TYPE_CHECKING:  # training imports this module where FAISS is not installed
    from sklearn.feature_extraction.text import TfidfVectorizer

    from .index import ConceptIndex
    from .kb import KnowledgeBase

logger = logging.getLogger(__name__)

# Queries scored per dense block: bounds memory at block × n_names floats.
QUERY_BLOCK = 256
# Name rows the dense search proposes for the hybrid score to rank. Adding the sparse side's own
# top 64 rows changed no Acc@1 on NCBI, BC5CDR-disease or CADEC dev (trained hybrid model).
HYBRID_ROWS = 64
# Bump when the features change, so cached hybrid states (HybridRescorer.for_index) are refitted.
HYBRID_STATE_VERSION = 3
# What HybridRescorer.save writes (files.json records them).
STATE_FILES = ("vocabulary.json", "idf.npy", "names.npz")


def char_ngram_vectorizer(ngram_range=(3, 3), min_df: int = 1) -> "TfidfVectorizer":
    """scispaCy's name features: tf-idf of character n-grams within word boundaries, lower-cased."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # 64 MB of RSS: fitting only

    return TfidfVectorizer(analyzer="char_wb", ngram_range=tuple(ngram_range), min_df=min_df,
                           dtype=np.float32, lowercase=True)


def char_wb_ngrams(text: str, n: int = 3) -> List[str]:
    """scikit-learn's char_wb analyzer for one n (lower-cased; each word padded with a space on
    either side; a word shorter than n counts once): HybridRescorer transforms mentions with it,
    so that linking needs no scikit-learn (tests/test_hybrid.py holds it to the original)."""
    grams: List[str] = []
    for word in text.lower().split():
        word = f" {word} "
        grams.extend(word[i : i + n] for i in range(max(1, len(word) - n + 1)))
    return grams


class HybridRescorer:
    """BioSyn's hybrid score for dense search hits: cosine + weight × the char 3-gram tf-idf
    cosine of the mention and the hit's name (the idf fitted on the names), divided by
    1 + weight so that scores stay on the cosine's scale (1 for an exact name) and `threshold`
    keeps its meaning; the order is BioSyn's.

    names: each index row's name (ConceptIndex.row_names), fitted with scikit-learn; or `state`,
    a folder `save` wrote (for_index caches one per index). weight: the sparse weight a model
    was trained with (SPARSE_FILE).
    """

    def __init__(self, names: Optional[Sequence[str]], weight: float, state: Optional[Path] = None):
        self.weight = float(weight)
        if state is not None:
            from .cache import damaged_record

            recorded = json.loads((state / "files.json").read_text(encoding="utf-8"))
            if set(recorded) != set(STATE_FILES) or damaged_record(state, recorded):
                raise ValueError(f"a file of {state} does not match its checksum")
            self.vocabulary: Dict[str, int] = json.loads((state / "vocabulary.json").read_text(encoding="utf-8"))
            self.idf = np.load(state / "idf.npy")
            self.name_vectors = scipy.sparse.load_npz(state / "names.npz").tocsr()
            if not (len(self.vocabulary) == len(self.idf) == self.name_vectors.shape[1]):
                raise ValueError(f"{state} holds name vectors of another vocabulary")
            return
        vectorizer = char_ngram_vectorizer()
        self.name_vectors = vectorizer.fit_transform(list(names)).tocsr()
        self.vocabulary = {gram: int(column) for gram, column in vectorizer.vocabulary_.items()}
        self.idf = vectorizer.idf_.astype(np.float32)

    def save(self, folder: Path) -> None:
        """Write the fitted state (vocabulary, idf, name vectors) for HybridRescorer(None, w, folder)."""
        (folder / "vocabulary.json").write_text(json.dumps(self.vocabulary, ensure_ascii=False), encoding="utf-8")
        np.save(folder / "idf.npy", self.idf)
        scipy.sparse.save_npz(folder / "names.npz", self.name_vectors, compressed=False)
        from .cache import file_records

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

        from .cache import cached_build

        cached_build(folder, fit, intact, "hybrid score's char n-gram tf-idf of the names",
                     takes="a few seconds for the bundled index")
        return loaded[-1]

    def transform(self, texts: Sequence[str]) -> scipy.sparse.csr_matrix:
        """Unit tf-idf vectors of `texts` (n-grams the names lack are dropped), as scikit-learn's
        fitted TfidfVectorizer gives them."""
        rows, columns = [], []
        for row, text in enumerate(texts):
            found = [self.vocabulary[g] for g in char_wb_ngrams(text) if g in self.vocabulary]
            rows += [row] * len(found)
            columns += found
        counts = scipy.sparse.csr_matrix((np.ones(len(columns), dtype=np.float32), (rows, columns)),
                                         shape=(len(texts), len(self.vocabulary)))  # duplicates summed
        weighted = counts.multiply(self.idf[None, :]).tocsr()
        norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1))).ravel()
        return scipy.sparse.diags(1 / np.where(norms > 0, norms, 1)).dot(weighted).tocsr().astype(np.float32)

    def for_texts(self, texts: Sequence[str]) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The `rescore` of ConceptIndex.search for queries embedding `texts`, in order."""
        queries = self.transform(list(texts))

        def rescore(positions: np.ndarray, rows: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            """positions: the block's queries (into `texts`); rows, cosines: (n, r) hits."""
            hit = rows >= 0
            names = self.name_vectors[np.where(hit, rows, 0).ravel()]
            mentions = queries[np.repeat(np.asarray(positions), rows.shape[1])]
            sparse = np.asarray(names.multiply(mentions).sum(axis=1), dtype=np.float32).reshape(rows.shape)
            return np.where(hit, (cosines + self.weight * sparse) / (1 + self.weight), -np.inf).astype(np.float32)

        return rescore


class SparseConceptIndex:
    """Char n-gram tf-idf vectors of every name of a KB, searched by cosine similarity.

    kb: the knowledge base (or None with `rows`: names, row concepts, concept ids; from_rows).
    ngram_range: character n-gram sizes (scispaCy: 3-grams within word boundaries).
    min_df: drop n-grams seen in fewer names (scispaCy uses 10; 1 keeps all).
    """

    def __init__(self, kb: Optional["KnowledgeBase"], ngram_range=(3, 3), min_df: int = 1,
                 rows: Optional[tuple] = None):
        self.kb = kb
        if rows is None:
            names, self.row_concepts = kb.name_row_concepts()
            self.concept_ids: List[str] = list(kb.cui_to_entity)
        else:
            names, self.row_concepts, self.concept_ids = rows
        self.vectorizer = char_ngram_vectorizer(ngram_range, min_df)
        self.name_vectors = self.vectorizer.fit_transform(names).T.tocsr()

    def score_rows(self, texts: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each text to every name row: a dense (len(texts), n_names) array."""
        return (self.vectorizer.transform(texts) @ self.name_vectors).toarray()

    @classmethod
    def from_rows(cls, names: Sequence[str], row_concepts: np.ndarray, concept_ids: Sequence[str],
                  **settings) -> "SparseConceptIndex":
        """An index of `names`, row i naming concept_ids[row_concepts[i]] (a key set's rows)."""
        return cls(None, rows=(list(names), np.asarray(row_concepts, dtype=np.int64), list(concept_ids)), **settings)

    def search(self, texts: Sequence[str], k: int = 10) -> List[Candidates]:
        """The k best distinct concepts for each text, [(concept_id, cosine), …] best first,
        ranked as every search is (ranking.best_concepts); names sharing no n-gram are no hit."""
        results: List[Candidates] = []
        n_rows = self.name_vectors.shape[1]
        for start in range(0, len(texts), QUERY_BLOCK):
            for row in self.score_rows(texts[start : start + QUERY_BLOCK]):
                k_rows = min(n_rows, max(8 * k, 64))
                while True:
                    top = np.argpartition(-row, k_rows - 1)[:k_rows] if k_rows < n_rows else np.arange(n_rows)
                    hits = np.where(row[top] > 0, top, -1)
                    best = best_concepts(row[top], hits, self.row_concepts, k)
                    if len(best) >= k or k_rows >= n_rows or (hits < 0).any():
                        break
                    k_rows = min(n_rows, k_rows * 4)
                results.append([(self.concept_ids[c], s) for c, s in best])
        return results
