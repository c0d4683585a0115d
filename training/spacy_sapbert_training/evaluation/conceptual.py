"""How well a model's vector space groups concepts, beyond linking: MCSM (the medical conceptual
similarity measure of Choi et al., 2016, as CODER and the CL+KGE paper report it, there written
MSCM) and the F1 of calling two names synonyms above a cosine threshold.

Both run on the bundled KB (MeSH and MONDO), so they need no corpus. Concepts are embedded by
their canonical names, through the model itself (for a query-side model, its trained side).
"""
import hashlib
from typing import Dict, List, Sequence, Tuple

import numpy as np

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase

# Type groups of the bundled KB: MeSH diseases (C), mental disorders (F03), chemicals (D), MONDO.
MCSM_GROUPS: Dict[str, Tuple[str, ...]] = {"C": ("C",), "F03": ("F03",), "D": ("D",), "MONDO": ("MONDO",)}
MCSM_K = 40


def mcsm_max(k: int = MCSM_K) -> float:
    """The score of a concept whose k nearest concepts all share its type: 11.09 for k = 40."""
    return float(sum(1 / np.log2(i + 1) for i in range(1, k + 1)))


def mcsm(vectors: np.ndarray, groups: Dict[str, np.ndarray], k: int = MCSM_K) -> Dict[str, float]:
    """For each type group (a boolean mask over the rows of `vectors`, unit concept vectors),
    the mean over its concepts of Σ_i 1[i-th nearest other concept is in the group] / log2(i+1),
    i = 1..k, neighbours taken among all rows."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    _, neighbours = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k + 1)
    # each concept finds itself first (or a twin with the same vector): drop its own row
    own = neighbours == np.arange(len(vectors))[:, None]
    others = np.array([row[~mask][:k] for row, mask in zip(neighbours, own)])
    weights = 1 / np.log2(np.arange(2, k + 2))
    scores = {}
    for name, member in groups.items():
        rows = np.flatnonzero(member)
        if len(rows):
            scores[name] = float((member[others[rows]] * weights).sum(axis=1).mean())
    return scores


def concept_groups(concepts: Sequence[Concept], groups: Dict[str, Tuple[str, ...]] = MCSM_GROUPS) -> Dict[str, np.ndarray]:
    """Each group's membership mask over `concepts` (a concept may be in several)."""
    return {name: np.array([c.has_type(prefixes) for c in concepts]) for name, prefixes in groups.items()}


def _half(concept_id: str) -> int:
    """A fixed split of concepts into dev (0) and held-apart (1) halves."""
    return hashlib.sha256(concept_id.encode()).digest()[0] & 1


def synonym_pairs(kb: KnowledgeBase, per_half: int = 2000, seed: int = 0) -> Dict[int, List[Tuple[str, str, bool]]]:
    """(name, name, same concept?) pairs for each half of the concepts: per concept with two
    names, one synonym pair and one pair with a name of another concept of the same half and
    type group, up to `per_half` of each kind."""
    rng = np.random.default_rng(seed)
    concepts = [c for c in kb if len(c.names) >= 2]
    by_half: Dict[int, List[Concept]] = {0: [], 1: []}
    for concept in concepts:
        by_half[_half(concept.concept_id)].append(concept)
    pairs: Dict[int, List[Tuple[str, str, bool]]] = {}
    for half, members in by_half.items():
        chosen = [members[i] for i in rng.permutation(len(members))[:per_half]]
        same_group: Dict[str, List[Concept]] = {}
        for concept in chosen:
            same_group.setdefault(_group_of(concept), []).append(concept)
        pairs[half] = []
        for concept in chosen:
            first, second = rng.choice(len(concept.names), 2, replace=False)
            pairs[half].append((concept.names[first], concept.names[second], True))
            peers = same_group[_group_of(concept)]
            other = peers[rng.integers(len(peers))]
            if other is not concept:
                pairs[half].append((concept.names[first], other.names[rng.integers(len(other.names))], False))
    return pairs


def _group_of(concept: Concept) -> str:
    return next((name for name, prefixes in MCSM_GROUPS.items() if concept.has_type(prefixes)), "other")


def best_threshold(similarity: np.ndarray, same: np.ndarray) -> Tuple[float, float]:
    """(θ, F1) of the threshold that maximises the F1 of "synonyms when cosine ≥ θ"."""
    order = np.argsort(-similarity, kind="stable")
    hits = np.cumsum(same[order])
    called = np.arange(1, len(order) + 1)
    f1 = 2 * hits / (called + same.sum())
    best = int(np.argmax(f1))
    return float(similarity[order][best]), float(f1[best])


def pair_f1(similarity: np.ndarray, same: np.ndarray, threshold: float) -> float:
    """The F1 of calling the pairs with cosine ≥ threshold synonyms."""
    called = similarity >= threshold
    hits = float((called & same).sum())
    return 2 * hits / (called.sum() + same.sum()) if called.any() or same.any() else 0.0
