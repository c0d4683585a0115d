"""How search hits become candidates: one query's best distinct concepts, ties in one fixed
order. Every search (dense, sparse, hybrid, the harness's dev packs) ranks through here."""
from typing import Dict, List, Tuple

import numpy as np

# What every search answers for one query: (concept id, score) pairs, best first.
Candidates = List[Tuple[str, float]]


def tie_order(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The order of one query's hits: best score first, and among scores equal to 6 decimals
    (one name under two concepts) the later row first, as FAISS's flat search mostly leaves
    them. FAISS's own tie order shifts with k; fixing it makes every search agree. It matters
    where a dictionary gives one name under two ids (MEDIC: an OMIM and a MeSH id; README)."""
    # in float64: FAISS pads a short result with -FLT_MAX, which overflows float32 when scaled
    return np.lexsort((-rows, -np.round(np.asarray(scores, dtype=np.float64), 6)))


def best_concepts(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray, k: int) -> List[Tuple[int, float]]:
    """One query's k best distinct concepts from its search hits (row -1: no hit), each scored
    by its best name, ties in tie_order; fewer than k when the hits hold fewer concepts."""
    best: Dict[int, float] = {}
    order = tie_order(scores, rows)
    for score, row in zip(scores[order], rows[order]):
        if row < 0 or len(best) == k:
            break
        best.setdefault(int(row_concepts[row]), float(score))
    return list(best.items())
