"""Knowledge bases: concepts and their names (`concepts`), and the formats they are read from
(`formats`: JSONL, OBO, MeSH, UMLS, MEDIC)."""
from .concepts import Concept, KBFormatError, KnowledgeBase, PathLike, clean_name, exact_key, name_hash, name_key

__all__ = ["Concept", "KBFormatError", "KnowledgeBase", "PathLike", "clean_name", "exact_key", "name_hash", "name_key"]
