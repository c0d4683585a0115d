"""spacy-sapbert: a spaCy pipe that links biomedical entities to ontology concepts with
SapBERT-style embeddings searched in a FAISS index.

spaCy finds the `sapbert_linker` factory through the `spacy_factories` entry point, so
`nlp.add_pipe("sapbert_linker")` and `spacy.load` need no import. The names below load on first
use, so the torch-only modules (`encoder`, `encoding`, `cache`, `ranking`, `kb`) import where
spaCy and FAISS are absent, as on a borrowed GPU machine that trains a model. It never imports the training code.
"""
import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Concept": "kb",
    "KBFormatError": "kb",
    "KnowledgeBase": "kb",
    "load_kb": "kb_formats",
    "write_jsonl": "kb_formats",
    "SapBERTLinker": "linker",
    "make_sapbert_linker": "linker",
    "load_ner": "demo",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
