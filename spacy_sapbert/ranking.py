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
    best: Dict[int, float] = {}
    order = tie_order(scores, rows)
    for score, row in zip(scores[order], rows[order]):
        if row < 0 or (len(best) == k and not tau):
            break
        best.setdefault(int(row_concepts[row]), float(score))
    if not tau or len(best) < 2:
        return list(best.items())[:k]
    return [(c, best[c]) for c in marginal_order(scores, rows, row_concepts, list(best), tau)[:k]]


def marginal_order(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray, concepts: List[int],
                   tau: float) -> List[int]:
    """`concepts` (in tie order) by their synonym-marginal score over the hits, best first;
    equal scores (to 6 decimals) keep their order."""
    hit = rows >= 0
    scores = np.asarray(scores, dtype=np.float64)[hit]
    position = {c: i for i, c in enumerate(concepts)}
    slots = np.array([position[int(c)] for c in row_concepts[rows[hit]]])
    mass = np.bincount(slots, weights=np.exp((scores - scores.max()) / tau), minlength=len(concepts))
    marginal = scores.max() + tau * np.log(mass)
    return [concepts[i] for i in np.lexsort((np.arange(len(concepts)), -np.round(marginal, 6)))]
