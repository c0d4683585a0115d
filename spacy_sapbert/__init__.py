"""spacy-sapbert: a spaCy pipe that links biomedical entities to ontology concepts with
SapBERT-style embeddings searched in a FAISS index.

spaCy finds the `sapbert_linker` factory through the `spacy_factories` entry point, so
`nlp.add_pipe("sapbert_linker")` and `spacy.load` need no import. The names below load on first
use, so importing the package costs nothing, and the modules training needs (`encoders`,
`cache`, `ranking`, `kb`) import on a machine that has torch but neither spaCy nor FAISS. The
layers, top down: `cli` → `pipe` → `candidates` → `ranking` → `search` + `encoders` → `kb`;
`corpus` links whole corpora through the pipe (docs/CONTRIBUTING.md). The runtime never imports
`spacy_sapbert_training`.
"""
import importlib as _importlib

__version__ = "0.2.0"

_EXPORTS = {
    "Concept": "kb.concepts",
    "KBFormatError": "kb.concepts",
    "KnowledgeBase": "kb.concepts",
    "load_kb": "kb.formats",
    "write_jsonl": "kb.formats",
    "SapBERTLinker": "pipe.linker",
    "make_sapbert_linker": "pipe.linker",
    "load_ner": "pipe.bundled",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(f".{module}", __name__), name)


def __dir__():
    """What the package exports (its subpackages are imported by name, as spacy_sapbert.kb)."""
    return sorted([*_EXPORTS, "__all__", "__doc__", "__file__", "__name__", "__path__", "__version__"])
