"""The scheme answers are given in: the ids text annotated with MeSH expects.

The bundled index merges MONDO into MeSH, so that OMIM-coded diseases are reachable; but a MONDO
concept that has no MeSH (or OMIM) id of its own names a disease MeSH files under a broader
heading ("cancer" MONDO:0004992 under neoplasms D009369, "breast cancer" MONDO:0007254 under
breast neoplasms D001943), and a MeSH-annotated corpus (CTD's MEDIC: NCBI-disease, BC5CDR) marks
such a mention with that heading.
"""
import re
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from .concepts import KnowledgeBase, exact_key, is_short_form

# MEDIC's scheme: MeSH descriptors and supplementary concepts (6 or 9 digits; a UMLS CUI, C and
# 7 digits, is not MeSH's), and OMIM.
MEDIC_SCHEME = (r"[CD]([0-9]{6}|[0-9]{9})$", r"OMIM:")

# Which rules of scheme_answers a cached copy was made by: raised with each change to them, so
# that answers cached for a user's index are not read after the rules change.
ANSWER_RULES = 2


def scheme_answers(kb: KnowledgeBase, scheme: Sequence[str] = MEDIC_SCHEME, max_depth: int = 4) -> Dict[str, List[str]]:
    """For each concept of `kb` none of whose ids (its own and its alternative ids) match a
    pattern of `scheme`: its twin in the scheme, then along each of its broader concepts in the
    order the KB lists them the concepts of the nearest level (followed up to `max_depth` levels)
    in the scheme, each once, the nearer first. Each parent is followed on its own, so that a near
    heading on one side ("hereditary disease": Genetic Diseases, Inborn) does not hide the one the
    other side reaches a level further up ("familial hemiplegic migraine" → hemiplegic migraine →
    Migraine with Aura). A concept's twin is the one concept in the scheme that bears its
    canonical name, or where none does its other names that are not short forms (as kb.exact_key
    compares names: "head and neck neoplasm", MONDO:0005586, is a name of Head and Neck Neoplasms,
    D006258, which MONDO does not cross-reference; _twins); an ancestor with a twin counts as in
    the scheme through it. Last comes its head: the one concept in the scheme that bears the
    longest ending of its canonical name ("heparin-induced thrombocytopenia", MONDO:0018048, is
    under thrombotic disease alone, whose twin is Thrombosis; its head is Thrombocytopenia), unless
    it lies above a heading already found ("familial hemiplegic migraine" keeps Migraine with Aura
    and not Migraine Disorders); the linker puts it first only where the mention's own scores rank
    it above the others. A concept with none of these is left out."""
    patterns = [re.compile(p) for p in scheme]

    def matches(concept_id: str) -> bool:
        return any(p.match(concept_id) for p in patterns)

    bearers = _bearers(kb, matches)
    twins = _twins(kb, matches, bearers)

    def in_scheme(concept_id: str) -> Optional[str]:
        return concept_id if matches(concept_id) else twins.get(concept_id)

    def nearest(parent: str, start: str) -> List[Tuple[int, str]]:
        level, seen = [parent], {start}
        for depth in range(max_depth):
            level = [c for c in dict.fromkeys(kb.resolve_id(b) for b in level) if c is not None and c not in seen]
            found = [(depth, heading) for heading in map(in_scheme, level) if heading is not None]
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
        if concept.concept_id in twins:
            found.insert(0, (-1, twins[concept.concept_id]))
        head = _head(concept.canonical_name, bearers)
        if head is not None and not any(head in _above(kb, c) for _, c in found):
            found.append((max_depth, head))
        if found:
            answers[concept.concept_id] = list(dict.fromkeys(c for _, c in found))
    return answers


def _bearers(kb: KnowledgeBase, matches: Callable[[str], bool]) -> Dict[str, Set[str]]:
    """Each name's concepts in the scheme (exact_key)."""
    bearers: Dict[str, Set[str]] = {}
    for concept in kb:
        if matches(concept.concept_id):
            for name in concept.names:
                bearers.setdefault(exact_key(name), set()).add(concept.concept_id)
    return bearers


def _above(kb: KnowledgeBase, concept_id: str, levels: int = 8) -> Set[str]:
    """The concepts above `concept_id`, up to `levels` levels."""
    above: Set[str] = set()
    level = [concept_id]
    for _ in range(levels):
        level = [c for c in dict.fromkeys(kb.resolve_id(b) for c in level for b in kb.cui_to_entity[c].broader)
                 if c is not None and c not in above]
        above.update(level)
        if not level:
            break
    return above


def _head(name: str, bearers: Dict[str, Set[str]]) -> Optional[str]:
    """The one concept in the scheme bearing the longest proper ending of `name`, word by word
    ("heparin-induced thrombocytopenia": Thrombocytopenia); None where the longest ending any of
    them bears is borne by two, or is a short form."""
    words = name.split()
    for start in range(1, len(words)):
        ending = " ".join(words[start:])
        bearing = bearers.get(exact_key(ending), ())
        if bearing:
            return next(iter(bearing)) if len(bearing) == 1 and not is_short_form(ending) else None
    return None


def _twins(kb: KnowledgeBase, matches: Callable[[str], bool], bearers: Dict[str, Set[str]]) -> Dict[str, str]:
    """Each concept outside the scheme whose canonical name is a name of exactly one concept in it
    (exact_key), or, where none bears it, whose other names are names of exactly one: that
    concept ("hereditary nonpolyposis colon cancer", MONDO:0018630, is also "Lynch syndrome", a
    name of Colorectal Neoplasms, Hereditary Nonpolyposis). Short forms (is_short_form) make no
    twin: "COAD" names colon adenocarcinoma in MONDO and COPD in MeSH."""
    twins: Dict[str, str] = {}
    for concept in kb:
        if not matches(concept.concept_id) and not any(matches(i) for i in concept.alt_ids):
            bearing = (bearers.get(exact_key(concept.canonical_name))
                       or {c for name in concept.aliases if not is_short_form(name)
                           for c in bearers.get(exact_key(name), ())})
            if len(bearing) == 1:
                twins[concept.concept_id] = next(iter(bearing))
    return twins


def index_answers(index, patterns: Sequence[str]) -> Dict[str, List[str]]:
    """`scheme_answers` of a loaded index's KB: as the index stores them (its row files, as the
    bundled index ships them), or made once and kept in the cache under the index's state key (a
    few hundred kB for the bundled index), so that a later load reads them without the KB."""
    import json

    from ..cache import cache_dir, replace_file

    stored = index.stored_answers(patterns) if hasattr(index, "stored_answers") else None
    if stored is not None:
        return stored
    key = index.state_key("answers", ANSWER_RULES, list(patterns))
    path = cache_dir() / f"answers-{key}.json" if key else None
    if path is not None and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    answers = scheme_answers(index.kb, patterns)
    if path is not None:
        replace_file(path, lambda target: target.write_text(json.dumps(answers), encoding="utf-8"))
    return answers
