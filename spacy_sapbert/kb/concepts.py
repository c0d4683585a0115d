"""Concepts and knowledge bases: the model every ontology format ends up in (`kb.formats`
reads them), the same shape as scispaCy's `KnowledgeBase` (`cui_to_entity`,
`alias_to_cuis`), so code written against scispaCy keeps working.
"""
import hashlib
import logging
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]


class KBFormatError(ValueError):
    """A knowledge-base file has a line the loader cannot read."""


# What exact_key reads as a space: anything but letters, digits and spaces.
_PUNCTUATION = re.compile(r"[^\w\s]|_")
SCISPACY_KEYS = ("concept_id", "canonical_name", "aliases", "types", "definition")


@dataclass(slots=True)
class Concept:
    """One ontology concept.

    concept_id: the concept's identifier (a CUI, a MeSH id, "MONDO:0000001", …).
    canonical_name: its preferred name.
    aliases: other names (synonyms), without the canonical name.
    types: type labels: MeSH tree numbers, UMLS semantic type ids, an ontology prefix.
    definition: a textual definition, if the source has one.
    alt_ids: other identifiers of the same concept (OMIM numbers in MEDIC, alternative ids).
    xrefs: cross-references to other vocabularies ("OMIM:123", "MESH:D000001").
    broader: ids of broader concepts (MeSH supplementary → mapped descriptors).
    """

    concept_id: str
    canonical_name: str
    aliases: List[str] = field(default_factory=list)
    types: List[str] = field(default_factory=list)
    definition: Optional[str] = None
    alt_ids: List[str] = field(default_factory=list)
    xrefs: List[str] = field(default_factory=list)
    broader: List[str] = field(default_factory=list)

    def __iter__(self):
        """The five fields of scispaCy's `Entity`, so that code written for its KB unpacks a
        concept: `cui, name, aliases, types, definition = kb.cui_to_entity[cui]`."""
        return iter((self.concept_id, self.canonical_name, self.aliases, self.types, self.definition))

    @property
    def names(self) -> List[str]:
        """The canonical name followed by the aliases."""
        return [self.canonical_name] + list(self.aliases)

    def has_type(self, prefixes: Sequence[str]) -> bool:
        """Whether a type of the concept starts with one of `prefixes` (MeSH trees nest: "C"
        takes every disease, "C14" the cardiovascular ones)."""
        prefixes = tuple(prefixes)
        return any(t.startswith(prefixes) for t in self.types)

    def __repr__(self) -> str:
        """As scispaCy prints its Entity: id, name, definition, types, at most 10 aliases."""
        n = len(self.aliases)
        aliases = (f"Aliases (abbreviated, total: {n}): \n\t {', '.join(self.aliases[:10])}" if n > 10
                   else f"Aliases: (total: {n}): \n\t {', '.join(self.aliases)}")
        return (f"CUI: {self.concept_id}, Name: {self.canonical_name}\nDefinition: {self.definition}\n"
                f"TUI(s): {', '.join(self.types)}\n{aliases}")

    def to_dict(self, scispacy: bool = False) -> dict:
        """The concept as a JSON-serialisable dict: scispaCy's five keys always, ours
        (alt_ids, xrefs, broader) when set, unless `scispacy` asks for exactly its keys
        (its `Entity` requires all five and refuses others)."""
        data = asdict(self)
        if scispacy:
            return {key: data[key] for key in SCISPACY_KEYS}
        return {key: value for key, value in data.items() if key in SCISPACY_KEYS or value not in (None, [])}


def _unique(items: Iterable[str]) -> List[str]:
    seen: Set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def clean_name(name: str) -> str:
    """Normalise Unicode (NFKC) and whitespace of a name; return "" for an empty name."""
    return " ".join(unicodedata.normalize("NFKC", name).split())


def name_key(text: str) -> str:
    """A name as dictionaries key it: case-folded, runs of whitespace as one space (an index's
    exact match also reads punctuation as spaces: exact_key)."""
    return " ".join(text.casefold().split())


def exact_key(text: str) -> str:
    """A name as the index compares it with a mention for an exact match: name_key with
    punctuation read as spaces, as the standard protocol normalises names and mentions
    ("Hoe-140" is "HOE 140", "amyloid beta peptide(1-42)" is "amyloid beta peptide 1 42")."""
    return " ".join(_PUNCTUATION.sub(" ", text.casefold()).split())


def is_short_form(text: str) -> bool:
    """A short form: 1 to 10 characters, the first a letter, at least half letters, and two
    capitals, or one in a form of one or two characters; a capitalised word ("paclitaxel
    (Taxol)") is a synonym, not a short form."""
    capitals = sum(c.isupper() for c in text)
    return (0 < len(text) <= 10 and text[0].isalpha() and (capitals >= 2 or (capitals and len(text) <= 2))
            and sum(c.isalpha() for c in text) * 2 >= len(text) and " " not in text)


def name_hash(text: str) -> int:
    """exact_key(text) as a 64-bit number, the same in every process (Python's own hash is
    salted): what the index compares names by when a mention is checked for an exact name
    (ConceptIndex.row_keys), 8 bytes a row where a dictionary of the names took 45 MB."""
    digest = hashlib.blake2b(exact_key(text).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class KnowledgeBase:
    """A set of concepts with scispaCy's lookup tables.

    concepts: the concepts; two with the same id are merged (names, types and ids united).
    name: a short name recorded in index metadata ("mesh-2024", "medic-2012-07-06").
    version: the source's version, if known.
    """

    def __init__(self, concepts: Iterable[Concept] = (), name: str = "kb", version: str = ""):
        self.name = name
        self.version = version
        self.cui_to_entity: Dict[str, Concept] = {}
        self._alias_to_cuis: Optional[Dict[str, Set[str]]] = None
        self._alt_to_cui: Dict[str, str] = {}
        self.n_empty_names = 0
        for concept in concepts:
            self.add(concept)

    def add(self, concept: Concept) -> Concept:
        """Add a concept, merging it into an existing concept with the same id."""
        names = [clean_name(n) for n in [concept.canonical_name] + list(concept.aliases)]
        n_empty = sum(1 for n in names if not n)
        self.n_empty_names += n_empty
        names = _unique(n for n in names if n)
        if not names:
            logger.warning("Concept %s has no non-empty name and is left out.", concept.concept_id)
            return concept
        existing = self.cui_to_entity.get(concept.concept_id)
        if existing is None:
            merged = Concept(
                concept_id=concept.concept_id,
                canonical_name=names[0],
                aliases=names[1:],
                types=_unique(concept.types),
                definition=concept.definition or None,
                alt_ids=_unique(a for a in concept.alt_ids if a != concept.concept_id),
                xrefs=_unique(concept.xrefs),
                broader=_unique(concept.broader),
            )
            self.cui_to_entity[concept.concept_id] = merged
        else:
            merged = existing
            merged.aliases = [n for n in _unique(merged.aliases + names) if n != merged.canonical_name]
            merged.types = _unique(merged.types + list(concept.types))
            merged.definition = merged.definition or concept.definition or None
            merged.alt_ids = _unique(
                a for a in merged.alt_ids + list(concept.alt_ids) if a != merged.concept_id
            )
            merged.xrefs = _unique(merged.xrefs + list(concept.xrefs))
            merged.broader = _unique(merged.broader + list(concept.broader))
        self._alias_to_cuis = None
        for alt in merged.alt_ids:
            self._alt_to_cui.setdefault(alt, merged.concept_id)
        return merged

    @property
    def alias_to_cuis(self) -> Dict[str, Set[str]]:
        """Each name → the ids of the concepts bearing it (scispaCy's table). Built on first use:
        linking never needs it, and for the bundled KB it would hold 230k sets (about 70 MB)."""
        if self._alias_to_cuis is None:
            table: Dict[str, Set[str]] = {}
            for concept in self:
                for name in concept.names:
                    table.setdefault(name, set()).add(concept.concept_id)
            self._alias_to_cuis = table
        return self._alias_to_cuis

    def __len__(self) -> int:
        return len(self.cui_to_entity)

    def __iter__(self) -> Iterator[Concept]:
        return iter(self.cui_to_entity.values())

    def __contains__(self, concept_id: str) -> bool:
        return self.resolve_id(concept_id) is not None

    @property
    def n_names(self) -> int:
        """How many (concept, name) pairs the knowledge base holds."""
        return sum(1 + len(c.aliases) for c in self)

    def alternative_ids(self) -> Dict[str, str]:
        """Each alternative id → the id of the concept that holds it (the first to, where several do)."""
        return dict(self._alt_to_cui)

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The id under which `concept_id` (a primary or alternative id) is stored, or None."""
        if concept_id in self.cui_to_entity:
            return concept_id
        return self._alt_to_cui.get(concept_id)

    def name_rows(self) -> Tuple[List[str], List[str]]:
        """The names to index and, row for row, their concept ids.

        Names that differ only in case within a concept are indexed once.
        """
        names, cuis = [], []
        for concept in self:
            seen: Set[str] = set()
            for name in concept.names:
                key = name.casefold()
                if key not in seen:
                    seen.add(key)
                    names.append(name)
                    cuis.append(concept.concept_id)
        return names, cuis

    def name_row_concepts(self) -> Tuple[List[str], np.ndarray]:
        """name_rows with each row's concept as its position in the KB (int32), as an index
        maps its rows."""
        names, cuis = self.name_rows()
        position = {cui: i for i, cui in enumerate(self.cui_to_entity)}
        return names, np.array([position[c] for c in cuis], dtype=np.int32)

    def name_lookup(self) -> Dict[str, List[str]]:
        """Each name, normalised by `name_key`, → the ids of the concepts bearing it, in KB order."""
        lookup: Dict[str, List[str]] = {}
        for name, cui in zip(*self.name_rows()):
            concepts = lookup.setdefault(name_key(name), [])
            if cui not in concepts:
                concepts.append(cui)
        return lookup

    def filter_types(self, prefixes: Sequence[str]) -> "KnowledgeBase":
        """A new knowledge base with the concepts that have a type starting with a prefix."""
        return KnowledgeBase((c for c in self if c.has_type(prefixes)), name=self.name, version=self.version)

    def __repr__(self) -> str:
        return f"KnowledgeBase(name={self.name!r}, concepts={len(self)}, names={self.n_names})"
