"""Character n-gram tf-idf search over concept names (scispaCy's candidate-generator
algorithm, searched exactly instead of through an approximate nmslib index)."""
from typing import Dict, List, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from .index import Candidates
from .kb import KnowledgeBase

# Queries scored per dense block: bounds memory at block × n_names floats.
QUERY_BLOCK = 256


class SparseConceptIndex:
    """Char n-gram tf-idf vectors of every name of a KB, searched by cosine similarity.

    kb: the knowledge base.
    ngram_range: character n-gram sizes (scispaCy: 3-grams within word boundaries).
    min_df: drop n-grams seen in fewer names (scispaCy uses 10; 1 keeps all).
    """

    def __init__(self, kb: KnowledgeBase, ngram_range=(3, 3), min_df: int = 1):
        self.kb = kb
        names, cuis = kb.name_rows()
        position = {cui: i for i, cui in enumerate(kb.cui_to_entity)}
        self.concept_ids: List[str] = list(kb.cui_to_entity)
        self.row_concepts = np.array([position[c] for c in cuis], dtype=np.int64)
        self.vectorizer = TfidfVectorizer(
            analyzer="char_wb", ngram_range=tuple(ngram_range), min_df=min_df, dtype=np.float32,
            lowercase=True,
        )
        self.name_vectors = self.vectorizer.fit_transform(names).T.tocsr()

    def score_rows(self, texts: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each text to every name row: a dense (len(texts), n_names) array."""
        return (self.vectorizer.transform(texts) @ self.name_vectors).toarray()

    def search(self, texts: Sequence[str], k: int = 10) -> List[Candidates]:
        """The k best distinct concepts for each text, [(concept_id, cosine), …] best first."""
        results: List[Candidates] = []
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
