"""The scheme answers are given in: the ids text annotated with MeSH expects.

The bundled index merges MONDO into MeSH, so that OMIM-coded diseases are reachable; but a MONDO
concept that has no MeSH (or OMIM) id of its own names a disease MeSH files under a broader
heading ("cancer" MONDO:0004992 under neoplasms D009369, "breast cancer" MONDO:0007254 under
breast neoplasms D001943), and a MeSH-annotated corpus (CTD's MEDIC: NCBI-disease, BC5CDR) marks
such a mention with that heading.
"""
import re
from typing import Dict, List, Sequence, Tuple

from .concepts import KnowledgeBase

# MEDIC's scheme: MeSH descriptors and supplementary concepts (6 or 9 digits; a UMLS CUI, C and
# 7 digits, is not MeSH's), and OMIM.
MEDIC_SCHEME = (r"[CD]([0-9]{6}|[0-9]{9})$", r"OMIM:")


def scheme_answers(kb: KnowledgeBase, scheme: Sequence[str] = MEDIC_SCHEME, max_depth: int = 4) -> Dict[str, List[str]]:
    """For each concept of `kb` none of whose ids (its own and its alternative ids) match a
    pattern of `scheme`: along each of its broader concepts in the order the KB lists them, the
    concepts of the nearest level (followed up to `max_depth` levels) whose own id matches one,
    each once, the nearer first. Each parent is followed on its own, so that a near heading on one side
    ("hereditary disease": Genetic Diseases, Inborn) does not hide the one the other side reaches
    a level further up ("familial hemiplegic migraine" → hemiplegic migraine → Migraine with
    Aura). A concept whose ancestors within reach hold none is left out."""
    patterns = [re.compile(p) for p in scheme]

    def matches(concept_id: str) -> bool:
        return any(p.match(concept_id) for p in patterns)

    def nearest(parent: str, start: str) -> List[Tuple[int, str]]:
        level, seen = [parent], {start}
        for depth in range(max_depth):
            level = [c for c in dict.fromkeys(kb.resolve_id(b) for b in level) if c is not None and c not in seen]
            found = [(depth, c) for c in level if matches(c)]
            if found or not level:
                return found
            seen.update(level)
            level = [b for c in level for b in kb.cui_to_entity[c].broader]
        return []

    answers: Dict[str, List[str]] = {}
    for concept in kb:
        if any(matches(i) for i in [concept.concept_id, *concept.alt_ids]):
            continue
        found = sorted((hit for parent in concept.broader for hit in nearest(parent, concept.concept_id)),
                       key=lambda hit: hit[0])  # the nearest first, in the KB's order among equals
        if found:
            answers[concept.concept_id] = list(dict.fromkeys(c for _, c in found))
    return answers


def index_answers(index, patterns: Sequence[str]) -> Dict[str, List[str]]:
    """`scheme_answers` of a loaded index's KB: as the index stores them (its row files, as the
    bundled index ships them), or made once and kept in the cache under the index's state key (a
    few hundred kB for the bundled index), so that a later load reads them without the KB."""
    import json

    from ..cache import cache_dir, replace_file

    stored = index.stored_answers(patterns) if hasattr(index, "stored_answers") else None
    if stored is not None:
        return stored
    key = index.state_key("answers", list(patterns))
    path = cache_dir() / f"answers-{key}.json" if key else None
    if path is not None and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    answers = scheme_answers(index.kb, patterns)
    if path is not None:
        replace_file(path, lambda target: target.write_text(json.dumps(answers), encoding="utf-8"))
    return answers
