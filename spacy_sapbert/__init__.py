"""spacy-sapbert: a spaCy pipe that links biomedical entities to ontology concepts with
SapBERT-style embeddings searched in a FAISS index.

Importing the package registers the `sapbert_linker` factory (the `spacy_factories` entry
point does the same for `spacy.load`). It never imports the training code.
"""
from .kb import Concept, KBFormatError, KnowledgeBase, load_kb, write_jsonl
from .linker import SapBERTLinker, make_sapbert_linker

__version__ = "0.1.0"

__all__ = [
    "Concept",
    "KBFormatError",
    "KnowledgeBase",
    "SapBERTLinker",
    "load_kb",
    "make_sapbert_linker",
    "write_jsonl",
]
