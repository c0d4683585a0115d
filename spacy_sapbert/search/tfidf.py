"""Character n-gram tf-idf over concept names, searched exactly: scispaCy's candidate-generator
algorithm without its approximate nmslib index. Its hits are ranked into concepts by `ranking`."""
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np


if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer

    from ..kb.concepts import KnowledgeBase

# Queries scored per dense block: bounds memory at block × n_names floats.
QUERY_BLOCK = 256


def char_ngram_vectorizer(ngram_range=(3, 3), min_df: int = 1) -> "TfidfVectorizer":
    """scispaCy's name features: tf-idf of character n-grams within word boundaries, lower-cased."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # 64 MB of RSS: fitting only

    return TfidfVectorizer(analyzer="char_wb", ngram_range=tuple(ngram_range), min_df=min_df,
                           dtype=np.float32, lowercase=True)


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

    def allowed_rows(self, type_prefixes: Optional[Sequence[str]] = None) -> int:
        """Every row: tf-idf search takes no type restriction."""
        return self.name_vectors.shape[1]

    def search_rows(self, texts: Sequence[str], n_rows: int,
                    type_prefixes: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Each text's `n_rows` best name rows by cosine: (scores, row ids), row -1 for a name
        sharing no n-gram with it. Rows become concepts in `ranking` (search_concepts)."""
        total = self.name_vectors.shape[1]
        scores = np.zeros((len(texts), n_rows), dtype=np.float32)
        rows = np.full((len(texts), n_rows), -1, dtype=np.int64)
        for start in range(0, len(texts), QUERY_BLOCK):
            for i, row in enumerate(self.score_rows(texts[start : start + QUERY_BLOCK]), start):
                top = np.argpartition(-row, n_rows - 1)[:n_rows] if n_rows < total else np.arange(total)
                scores[i, : len(top)] = row[top]
                rows[i, : len(top)] = np.where(row[top] > 0, top, -1)
        return scores, rows
