"""Character n-gram tf-idf over concept names: search (scispaCy's candidate-generator algorithm,
searched exactly instead of through an approximate nmslib index), and BioSyn's hybrid score
for dense search hits."""
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

if TYPE_CHECKING:  # training imports this module where FAISS is not installed
    from .index import Candidates
    from .kb import KnowledgeBase

# Queries scored per dense block: bounds memory at block × n_names floats.
QUERY_BLOCK = 256
# Name rows the dense search proposes for the hybrid score to rank. Adding the sparse side's own
# top 64 rows changed no Acc@1 on NCBI, BC5CDR-disease or CADEC dev (trained hybrid model).
HYBRID_ROWS = 64


def char_ngram_vectorizer(ngram_range=(3, 3), min_df: int = 1) -> TfidfVectorizer:
    """scispaCy's name features: tf-idf of character n-grams within word boundaries, lower-cased."""
    return TfidfVectorizer(analyzer="char_wb", ngram_range=tuple(ngram_range), min_df=min_df,
                           dtype=np.float32, lowercase=True)


class HybridRescorer:
    """BioSyn's hybrid score for dense search hits: cosine + weight × the char 3-gram tf-idf
    cosine of the mention and the hit's name (the idf fitted on the names), divided by
    1 + weight so that scores stay on the cosine's scale (1 for an exact name) and `threshold`
    keeps its meaning; the order is BioSyn's.

    names: each index row's name (ConceptIndex.row_names). weight: the sparse weight a model
    was trained with (SPARSE_FILE).
    """

    def __init__(self, names: Sequence[str], weight: float):
        self.weight = float(weight)
        self.vectorizer = char_ngram_vectorizer()
        self.name_vectors = self.vectorizer.fit_transform(list(names)).tocsr()

    def for_texts(self, texts: Sequence[str]) -> Callable[[int, np.ndarray, np.ndarray], np.ndarray]:
        """The `rescore` of ConceptIndex.search for queries embedding `texts`, in order."""
        queries = self.vectorizer.transform(list(texts)).tocsr()

        def rescore(query: int, rows: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            scores = np.full(len(rows), -np.inf, dtype=np.float32)
            hit = rows >= 0
            sparse = (self.name_vectors[rows[hit]] @ queries[query].T).toarray().ravel()
            scores[hit] = (cosines[hit] + self.weight * sparse) / (1 + self.weight)
            return scores

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
            names, cuis = kb.name_rows()
            position = {cui: i for i, cui in enumerate(kb.cui_to_entity)}
            self.concept_ids: List[str] = list(kb.cui_to_entity)
            self.row_concepts = np.array([position[c] for c in cuis], dtype=np.int64)
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

    def search(self, texts: Sequence[str], k: int = 10) -> List["Candidates"]:
        """The k best distinct concepts for each text, [(concept_id, cosine), …] best first."""
        results: List["Candidates"] = []
        n_rows = self.name_vectors.shape[1]
        for start in range(0, len(texts), QUERY_BLOCK):
            scores = self.score_rows(texts[start : start + QUERY_BLOCK])
            for row in scores:
                k_rows = min(n_rows, max(8 * k, 64))
                while True:
                    top = np.argpartition(-row, k_rows - 1)[:k_rows] if k_rows < n_rows else np.arange(n_rows)
                    top = top[np.argsort(-row[top], kind="stable")]
                    best: Dict[int, float] = {}
                    for r in top:
                        if row[r] <= 0:
                            break
                        best.setdefault(int(self.row_concepts[r]), float(row[r]))
                    if len(best) >= k or k_rows >= n_rows or row[top[-1]] <= 0:
                        break
                    k_rows = min(n_rows, k_rows * 4)
                results.append([(self.concept_ids[c], s) for c, s in list(best.items())[:k]])
        return results
