"""Acc@k as the BioSyn/SapBERT papers count it: over concepts, a composite right only if every
part is. Pure Python, so a GPU machine without spaCy scores as the harness does."""
from typing import List, Sequence, Set

MAX_K = 10


def accuracy_at_k(rankings: Sequence[Sequence[Sequence[str]]], golds: Sequence[Set[str]], max_k: int = MAX_K) -> List[float]:
    """Acc@1 … Acc@max_k: a query is right at k if every one of its parts has a gold concept
    among its first k predicted concepts.

    rankings: per query, per part, concept ids best first.
    golds: per query, the set of gold concept ids.
    """
    if not rankings:
        return [0.0] * max_k
    right = [0] * max_k
    for parts, gold in zip(rankings, golds):
        for k in range(1, max_k + 1):
            if all(gold.intersection(ranking[:k]) for ranking in parts):
                right[k - 1] += 1
    return [r / len(rankings) for r in right]
