"""The Span extensions the linker sets: `cui`, `cui_score`, and the candidate lists, which are
stored behind a getter so that they come back as (concept_id, score) tuples from
nlp.pipe(n_process=2) too, whose workers return them as lists."""
from typing import Callable, Dict, List, Tuple

from spacy.tokens import Span


def _stored(candidates_attr: str) -> str:
    return f"{candidates_attr}_stored"


def _candidates_getter(candidates_attr: str) -> Callable[[Span], List[Tuple[str, float]]]:
    store = _stored(candidates_attr)

    def candidates(span: Span) -> List[Tuple[str, float]]:
        return [tuple(pair) for pair in (span._.get(store) or [])]

    candidates.sapbert_store = store  # marks the getter as ours
    return candidates


def register_extensions(cui_attr: str, score_attr: str, *candidate_attrs: str) -> Dict[str, str]:
    """Register the Span extensions; return, for each of `candidate_attrs`, the stored
    attribute behind it, or the attribute itself where another package (scispaCy's linker)
    registered it first, in which case the candidates are set on it directly."""
    for attr in (cui_attr, score_attr):
        if not Span.has_extension(attr):
            Span.set_extension(attr, default=None)
    stores = {}
    for attr in candidate_attrs:
        store = _stored(attr)
        if not Span.has_extension(store):
            Span.set_extension(store, default=None)
        if not Span.has_extension(attr):
            Span.set_extension(attr, getter=_candidates_getter(attr))
        getter = Span.get_extension(attr)[2]
        stores[attr] = store if getattr(getter, "sapbert_store", None) == store else attr
    return stores
