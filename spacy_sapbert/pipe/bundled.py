"""The demo pipeline behind `spacy-sapbert link`: NER, abbreviations, linker."""
from pathlib import Path
from typing import Dict, List, Optional

import spacy
from spacy.language import Language
from spacy.lang.en.stop_words import STOP_WORDS

from ..assets import ASSETS, DEFAULT
from ..kb.concepts import KnowledgeBase
from .tokenization import biomedical_tokens

DEMO_NER = ASSETS / "ner"


def _label_for(concept, label_types: Dict[str, List[str]]) -> Optional[str]:
    return next((label for label, prefixes in label_types.items() if concept.has_type(prefixes)), None)


def add_dictionary_ner(nlp: Language, kb: KnowledgeBase, label_types: Dict[str, List[str]]) -> Language:
    """Add an entity ruler that tags the KB's names (case-insensitive), labelled by type.

    A stand-in NER for when no trained NER is installed: names shorter than four characters,
    single stop words and MeSH's inverted forms ("Anemia, Hemolytic") are left out.
    """
    # label_types may list one label in several spellings ("Disease", "DISEASE"): take the
    # first spelling of each.
    labels: Dict[str, List[str]] = {}
    for label, prefixes in label_types.items():
        if all(label.lower() != known.lower() for known in labels):
            labels[label] = prefixes
    patterns = []
    for concept in kb:
        label = _label_for(concept, labels) or "Entity"
        for name in concept.names:
            if len(name) < 4 or ", " in name or name.lower() in STOP_WORDS:
                continue
            patterns.append({"label": label, "pattern": name})
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"}, before="sapbert_linker")
    ruler.add_patterns(patterns)
    return nlp


def load_ner() -> Language:
    """The bundled NER (spacy_sapbert/assets/ner: Disease and Chemical, a CPU tok2vec + NER
    trained on BC5CDR and NCBI-disease train) as a spaCy pipeline, ready for `nlp.add_pipe("sapbert_linker")`:
    what the README's snippet and `spacy-sapbert link` start from."""
    if not (DEMO_NER / "config.cfg").exists():
        from ..cache import ResourceError

        raise ResourceError(f"No NER is bundled in {DEMO_NER}; train one with `spacy project run ner`, or "
                            "start from any pipeline that sets doc.ents.")
    return spacy.load(DEMO_NER)


def add_abbreviation_detector(nlp: Language) -> Language:
    """Add the abbreviation detector (scispaCy's, or its copy where scispaCy is not installed)
    when the pipeline has none."""
    if "abbreviation_detector" in nlp.pipe_names:
        return nlp
    from . import abbreviation_detector  # noqa: F401  (registers the factory)

    nlp.add_pipe("abbreviation_detector", before="sapbert_linker")
    return nlp


def demo_pipeline(
    ner: Optional[str] = None,
    model: str = DEFAULT,
    index: str = DEFAULT,
    linker_config: Optional[dict] = None,
    encoder_config: Optional[dict] = None,
    names: Optional[str] = None,
    index_config: Optional[dict] = None,
) -> Language:
    """NER + abbreviations + `sapbert_linker`.

    ner: a spaCy pipeline name or path whose NER sets doc.ents (e.g. scispaCy's
        en_ner_bc5cdr_md); None takes the bundled demo NER, or, until one is bundled, a
        dictionary ruler over the index's names.
    names: a names table the linker adds to its index's names (index.names).
    index_config: more settings of the linker's index sub-config (`shipped_names`).
    With the bundled NER the linker drops the entities it finds no concept for (`drop_unlinked`)
    and tags an entity's text again where the document repeats it (`repeated_entities`), unless
    linker_config says otherwise: that NER's span F1 gains by each on held-out train folds.
    """
    from . import linker  # noqa: F401  (registers the factory when not installed

    if ner is None and (DEMO_NER / "config.cfg").exists():
        ner = str(DEMO_NER)
    # The bundled NER's tokenizer has the biomedical_tokens rules already; a user's NER is kept as it is.
    nlp = spacy.load(ner) if ner is not None else biomedical_tokens(spacy.blank("en"))
    if "sentencizer" not in nlp.pipe_names and not nlp.has_pipe("parser") and not nlp.has_pipe("senter"):
        nlp.add_pipe("sentencizer", first=True)
    # A saved pipeline may bring its own linker: this one, with these settings, replaces it.
    for name in [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "sapbert_linker"]:
        nlp.remove_pipe(name)
    index_settings = {"index": index, **({"names": names} if names is not None else {}), **(index_config or {})}
    bundled = ner is not None and Path(ner).resolve() == DEMO_NER.resolve()
    config = {"encoder": {"model": model, **(encoder_config or {})}, "index": index_settings,
              **({"drop_unlinked": True, "repeated_entities": True} if bundled else {}), **(linker_config or {})}
    pipe = nlp.add_pipe("sapbert_linker", config=config)
    pipe.initialize()
    if ner is None:
        add_dictionary_ner(nlp, pipe.index.kb, pipe.index.meta.get("label_types", {}))
    add_abbreviation_detector(nlp)
    return nlp
