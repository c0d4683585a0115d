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


def best_concepts(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray, k: int,
                  tau: float = 0.0) -> List[Tuple[int, float]]:
    """One query's k best distinct concepts from its search hits (row -1: no hit), each scored
    by its best name, ties in tie_order; fewer than k when the hits hold fewer concepts.

    tau > 0 ranks the concepts instead by BioSyn's synonym-marginal score, the soft maximum
    tau · log Σ exp(score / tau) over each concept's names among the hits (what a model trained
    with the synonym-marginal likelihood at that tau learned to raise), ties by their best
    name's tie order; each keeps its best name's score, so `threshold` keeps its meaning."""
    order = tie_order(scores, rows)
    if tau:
        return marginal_concepts(np.asarray(scores, dtype=np.float64)[order], rows[order], row_concepts, k, tau)
    best: Dict[int, float] = {}
    for score, row in zip(scores[order], rows[order]):
        if row < 0 or len(best) == k:
            break
        best.setdefault(int(row_concepts[row]), float(score))
    return list(best.items())


def marginal_concepts(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray, k: int,
                      tau: float) -> List[Tuple[int, float]]:
    """The k best concepts by synonym-marginal score of hits already in tie order, each with its
    best name's score; equal marginals (to 6 decimals) keep their best names' tie order."""
    hit = rows >= 0
    scores, concepts = scores[hit], row_concepts[rows[hit]]
    if not len(concepts):
        return []
    unique, first = np.unique(concepts, return_index=True)  # first: each concept's best name
    mass = np.bincount(np.searchsorted(unique, concepts), weights=np.exp((scores - scores[0]) / tau))
    marginal = scores[0] + tau * np.log(mass)
    ranked = np.lexsort((first, -np.round(marginal, 6)))[:k]
    return [(int(unique[i]), float(scores[first[i]])) for i in ranked]
