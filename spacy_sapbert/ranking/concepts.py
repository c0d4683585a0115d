"""How search hits become candidates: one query's best distinct concepts, ties in one fixed
order, the synonym-marginal score, exact names first, and the search widened until k distinct
concepts are found. Every search (dense, tf-idf, hybrid; the pipe and the harness) ranks
through `search_concepts`; the indexes only return name rows and scores."""
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

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
                  tau: float = 0.0, exact: Optional[np.ndarray] = None,
                  named_elsewhere: Sequence[int] = (),
                  ranked: Optional[List[Tuple[int, float]]] = None) -> List[Tuple[int, float]]:
    """One query's k best distinct concepts from its search hits (row -1: no hit), each scored
    by its best name, ties in tie_order; fewer than k when the hits hold fewer concepts.

    tau > 0 ranks the concepts instead by BioSyn's synonym-marginal score, the soft maximum
    tau · log Σ exp(score / tau) over each concept's names among the hits (what a model trained
    with the synonym-marginal likelihood at that tau learned to raise), ties by their best
    name's tie order, each scored by it (at most 1): the best name's score raised by the
    concept's other close names. At threshold 0.7, BC5CDR train end to end linked as with the
    best name's score (link F1 0.8075 against 0.8085; docs/results.md).

    exact: True where a hit's name is the query's own (ConceptIndex.row_keys); the concepts of
    those names come first, in the order above, then the concepts in `named_elsewhere` (bearing
    the query's name in rows the search did not reach) in their order, then the rest
    (candidates.Scoring.exact_first). A concept bearing the query's own name scores 1.0, as an
    identical string does under scispaCy's tf-idf, so that `threshold` never drops it.

    ranked: every concept of the hits already ranked by their synonym-marginal score
    (marginal_block, for a block of queries at once), in place of ranking them here."""
    named = set() if exact is None else {int(row_concepts[r]) for r in rows[exact & (rows >= 0)]}
    named.update(named_elsewhere)
    wanted = len(rows) if named else k  # every concept, so that an exact one past the k-th moves up
    if ranked is None and tau:
        ranked = marginal_block(np.asarray(scores)[None], np.asarray(rows)[None], row_concepts, tau)[0][:wanted]
    elif ranked is None:
        order = tie_order(scores, rows)
        best: Dict[int, float] = {}
        for score, row in zip(scores[order], rows[order]):
            if row < 0 or len(best) == wanted:
                break
            best.setdefault(int(row_concepts[row]), float(score))
        ranked = list(best.items())
    if named:
        found = [c for c, _ in ranked if c in named]
        first = found + [c for c in dict.fromkeys(named_elsewhere) if c not in found]
        ranked = [(c, 1.0) for c in first] + [c for c in ranked if c[0] not in named]
    return ranked[:k]


def marginal_block(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray,
                   tau: float) -> List[List[Tuple[int, float]]]:
    """For each query of a block ((n, r) hits, row -1: none), every concept of its hits ranked by
    synonym-marginal score (best_concepts), each with that score (at most 1, an identical
    string's), so that a list of them reads in the order of its scores; equal marginals (to 6
    decimals) keep their best names' tie order. Each query's sums run over its own hits in tie
    order, as ranking the query alone would run them (tests/runtime/test_marginal.py holds them
    to it bit for bit), in a few numpy calls for the block instead of a dozen for each query."""
    n, width = rows.shape
    flat = np.asarray(scores, dtype=np.float64).ravel()
    queries = np.repeat(np.arange(n), width)
    order = np.lexsort((-rows.ravel(), -np.round(flat, 6), queries))  # tie_order within each query
    hit_rows = rows.ravel()[order]
    hit = hit_rows >= 0
    scores_, rows_, owners = flat[order][hit], hit_rows[hit], queries[order][hit]
    if not len(rows_):
        return [[] for _ in range(n)]
    concepts = np.asarray(row_concepts[rows_], dtype=np.int64)
    span = int(concepts.max()) + 1
    starts = np.searchsorted(owners, np.arange(n))  # each query's first (best) hit
    unique, first = np.unique(owners * span + concepts, return_index=True)  # first: each concept's best name
    which = np.searchsorted(unique, owners * span + concepts)
    own_query = unique // span
    mass = np.bincount(which, weights=np.exp((scores_ - scores_[starts[owners]]) / tau))
    marginal = scores_[starts[own_query]] + tau * np.log(mass)
    ranked = np.lexsort((first - starts[own_query], -np.round(marginal, 6), own_query))
    # The same score shown from each concept's own best name, so that one name shows its score
    # exactly (from the top hit's, exp and log would leave it off by an ulp or two).
    best = scores_[first]
    own = best + tau * np.log(np.bincount(which, weights=np.exp((scores_ - best[which]) / tau)))
    ids, shown = (unique % span)[ranked].tolist(), np.minimum(own[ranked], 1.0).tolist()
    bounds = np.searchsorted(own_query[ranked], np.arange(n + 1)).tolist()
    return [list(zip(ids[a:b], shown[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


class RowSearch(Protocol):
    """What ranking asks of an index (`search.index.ConceptIndex`, `search.tfidf.SparseConceptIndex`):
    name rows and their scores, nothing about concepts. Exact names first (search_concepts'
    exact_keys) also asks `row_keys()`, `rows_named(key)` and `has_type`, which ConceptIndex has."""

    row_concepts: np.ndarray
    concept_ids: List[str]

    def allowed_rows(self, type_prefixes: Optional[Sequence[str]]) -> int:
        """How many rows belong to concepts of `type_prefixes` (every row for None)."""

    def search_rows(self, queries, n_rows: int, type_prefixes: Optional[Sequence[str]] = None
                    ) -> Tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of each query's `n_rows` best rows, best first; row -1 pads."""


def search_concepts(index: RowSearch, queries, k: int = 10, type_prefixes: Optional[Sequence[str]] = None,
                    rescore: Optional[Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = None,
                    min_rows: int = 32, tau: float = 0.0,
                    exact_keys: Optional[Sequence[int]] = None) -> List[Candidates]:
    """The k best distinct concepts of each query, [(concept_id, score), …] best first: rows
    fetched from `index` (at least max(4k, min_rows); widened ×4 while a query's rows hold fewer
    than k concepts and more rows exist), then ranked by best_concepts.

    queries: what the index searches with (vectors for the dense index, texts for tf-idf).
    type_prefixes: only concepts with a type starting with one of these.
    rescore: called as rescore(query positions, rows, scores) on a block's hits ((n, rows)
        arrays; row -1: none), returns their scores (the hybrid score: ranking.hybrid).
    tau: > 0 ranks concepts by their synonym-marginal score over the rows fetched.
    exact_keys: each query's text as kb.name_hash gives it; concepts holding a row of that
        name rank first at score 1.0, those the search reached in its order, then the others
        (index.rows_named), so a mention that is a name of the index always has its concepts.
    """
    n_allowed = index.allowed_rows(type_prefixes)
    results: List[Candidates] = [[] for _ in range(len(queries))]
    if n_allowed == 0 or k <= 0:
        return results
    query_keys = None if exact_keys is None else np.asarray(exact_keys, dtype=np.uint64)
    pending = np.arange(len(queries))
    n_rows = min(n_allowed, max(4 * k, min_rows))
    while len(pending):
        scores, rows = index.search_rows(_take(queries, pending), n_rows, type_prefixes)
        if rescore is not None:
            scores = rescore(pending, rows, scores)
        exact = [None] * len(rows)
        if query_keys is not None:
            exact = (index.row_keys()[np.maximum(rows, 0)] == query_keys[pending][:, None]) & (rows >= 0)
        short = []
        ranked = marginal_block(scores, rows, index.row_concepts, tau) if tau else [None] * len(rows)
        named = _named_at_all(index, None if query_keys is None else query_keys[pending], len(rows))
        for query, score_row, row_ids, exact_row, ranked_row, is_named in zip(pending, scores, rows, exact, ranked,
                                                                               named):
            elsewhere = () if not is_named else _named_elsewhere(index, query_keys[query], row_ids, type_prefixes)
            best = best_concepts(score_row, row_ids, index.row_concepts, k, tau, exact_row, elsewhere, ranked_row)
            if len(best) >= k or n_rows >= n_allowed or (row_ids < 0).any():
                results[query] = [(index.concept_ids[c], s) for c, s in best]
            else:
                short.append(query)
        pending = np.array(short, dtype=np.int64)
        n_rows = min(n_allowed, n_rows * 4)
    return results


def _named_at_all(index: RowSearch, keys: Optional[np.ndarray], n: int) -> List[bool]:
    """For each of n query keys, whether any row of the index bears that name (so that
    _named_elsewhere may find concepts): found at once where the index can say (named_among),
    else asked query by query; none without keys."""
    if keys is None:
        return [False] * n
    among = getattr(index, "named_among", None)
    return among(keys).tolist() if among is not None else [True] * n


def _named_elsewhere(index: RowSearch, key: int, hits: np.ndarray,
                     type_prefixes: Optional[Sequence[str]]) -> List[int]:
    """The concepts (of `type_prefixes`) bearing the name `key` in rows outside `hits`, in row
    order: a mention that is a name of the index always has that name's concepts."""
    reached = set(hits.tolist())
    rows = [int(r) for r in index.rows_named(key) if int(r) not in reached]
    concepts = [int(index.row_concepts[r]) for r in rows]
    if type_prefixes:
        concepts = [c for c in concepts if index.has_type(c, type_prefixes)]
    return list(dict.fromkeys(concepts))


def _take(queries, positions: np.ndarray):
    if isinstance(queries, np.ndarray):
        return queries[positions]
    return [queries[i] for i in positions]
