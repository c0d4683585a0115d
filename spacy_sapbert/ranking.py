"""How search hits become candidates: one query's best distinct concepts, ties in one fixed
order. Every search (dense, sparse, hybrid, the harness's dev packs) ranks through here."""
from typing import Dict, List, Optional, Tuple

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
                  tau: float = 0.0, exact: Optional[np.ndarray] = None) -> List[Tuple[int, float]]:
    """One query's k best distinct concepts from its search hits (row -1: no hit), each scored
    by its best name, ties in tie_order; fewer than k when the hits hold fewer concepts.

    tau > 0 ranks the concepts instead by BioSyn's synonym-marginal score, the soft maximum
    tau · log Σ exp(score / tau) over each concept's names among the hits (what a model trained
    with the synonym-marginal likelihood at that tau learned to raise), ties by their best
    name's tie order; each keeps its best name's score, so `threshold` keeps its meaning.

    exact: True where a hit's name is the query's own (ConceptIndex.row_keys); the concepts of
    those names come first, in the order above, then the rest (CandidateSettings.exact_first)."""
    order = tie_order(scores, rows)
    named = set() if exact is None else {int(row_concepts[r]) for r in rows[exact & (rows >= 0)]}
    wanted = len(rows) if named else k  # every concept, so that an exact one past the k-th moves up
    if tau:
        ranked = marginal_concepts(np.asarray(scores, dtype=np.float64)[order], rows[order], row_concepts, wanted, tau)
    else:
        best: Dict[int, float] = {}
        for score, row in zip(scores[order], rows[order]):
            if row < 0 or len(best) == wanted:
                break
            best.setdefault(int(row_concepts[row]), float(score))
        ranked = list(best.items())
    if named:
        ranked = [c for c in ranked if c[0] in named] + [c for c in ranked if c[0] not in named]
    return ranked[:k]


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
