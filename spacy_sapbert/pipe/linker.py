"""The `sapbert_linker` pipe: collect the entities (or a span group), link them through a
`candidates.CandidateGenerator`, set the annotations, as scispaCy's linker does around its
candidate generator. The knobs are `candidates.CandidateSettings` and `PipeSettings`; the
encoder and the index come from the registered sub-configs of `pipe.loaders`."""
import dataclasses
import inspect
import logging
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import srsly
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.util import minibatch, registry

from ..mentions.abbreviations import follow_long_forms, is_short_form, linked_text, long_forms
from ..candidates import CandidateGenerator, Candidates, CandidateSettings, Mention, Scoring, check_settings
from ..encoders.base import in_window
from ..mentions.parenthetical import parenthetical_sources
from ..search.index import ConceptIndexError, check_label_types
from .loaders import ENCODER_CONFIG, INDEX_CONFIG, SCORING_CONFIG, EncoderLoader, IndexLoader

logger = logging.getLogger(__name__)
# scispaCy's AbbreviationDetector runs an empty Matcher on every document without a definition,
# and spaCy warns (W036) each time; only that warning, from that module, is silenced.
warnings.filterwarnings("ignore", message=r"\[W036\]", module=r"(scispacy\.abbreviation|spacy_sapbert\.mentions\.schwartz_hearst)")

MODEL_DIR = "model"
INDEX_DIR = "index"
CFG_FILE = "cfg.json"
# What to_disk writes, each a name `exclude` may give: the model, the index, the names table, cfg.json.
SERIALIZED = ("model", "index", "names", "cfg")
# The names table (index.names) in a saved pipeline.
NAMES_FILE = "names.tsv"


ATTRIBUTES = {"cui": "cui", "score": "cui_score", "candidates": "kb_ents", "nil_candidates": "nil_kb_ents"}


@dataclass
class PipeSettings:
    """What the pipe links and where it writes (knobs of the pipe's config).

    resolve_abbreviations: link the long form of abbreviations found by scispaCy's
        AbbreviationDetector (`doc._.abbreviations`), with the definitions it misses when such a
        detector runs before this pipe, and a short form the text never defines as the one other
        entity it abbreviates; and put entities right by the definitions (an entity that ends a
        long form but starts inside it is widened to it; a short form takes the label of the
        entity over its long form). docs/evaluation.md names each step.
    labels: entity labels to link; empty links every entity (any case: DISEASE is Disease).
    label_types: entity label → allowed concept type prefixes (e.g. {"Disease": ["C", "F03"]});
        None takes the index's own mapping, {} restricts nothing.
    spans_key: link the span group `doc.spans[spans_key]` (as medspaCy keeps its entities)
        instead of `doc.ents`.
    batch_size: documents per batch in `pipe` (their distinct mentions are encoded together).
    attributes: the names of the Span extensions set, {"cui": …, "score": …, "candidates": …,
        "nil_candidates": …}: a NIL entity's candidates (below the threshold, so its `kb_ents`
        is empty) go in the last, so a user can see how close it came; a linked entity's is [].
    parenthetical_labels: entity labels (any case) whose "A (B)" pairs read B as another name of A:
        the one scoring lower and its repeats in the document take the other's candidates
        ("amrubicin (SM-5887)", "WR-2721 (amifostine)"; mentions.parenthetical); empty: none.
        Chemical only by default:
        for diseases a parenthesis is as often a subtype or a cause as a synonym.
    follow_long_forms: not a config key (configs before 0.2 set it): False keeps entities as the
        NER left them while their abbreviations are still resolved.
    """

    resolve_abbreviations: bool = True
    labels: List[str] = field(default_factory=list)
    label_types: Optional[Dict[str, List[str]]] = None
    spans_key: Optional[str] = None
    batch_size: int = 256
    attributes: Dict[str, str] = field(default_factory=lambda: dict(ATTRIBUTES))
    parenthetical_labels: List[str] = field(default_factory=lambda: ["Chemical"])
    follow_long_forms: bool = True

    def __post_init__(self) -> None:
        check_settings(self)
        for key in ("labels", "parenthetical_labels"):
            value = getattr(self, key)
            if not (isinstance(value, (list, tuple)) and all(isinstance(label, str) for label in value)):
                raise ValueError(f"{key} ({value!r}) must be a list of entity labels, such as [\"Chemical\"]; set it "
                                 "in the sapbert_linker config.")
        if isinstance(self.attributes, dict) and set(self.attributes) < set(ATTRIBUTES):
            self.attributes = {**ATTRIBUTES, **self.attributes}
        if not (isinstance(self.attributes, dict) and set(self.attributes) == set(ATTRIBUTES)
                and all(isinstance(v, str) and v for v in self.attributes.values())):
            raise ValueError(f"attributes ({self.attributes!r}) must name the Span extensions {sorted(ATTRIBUTES)}, such as "
                             f"{ATTRIBUTES}; set it in the sapbert_linker config.")


SETTINGS = (CandidateSettings, PipeSettings, Scoring)
# Knobs that are not top-level config keys (Scoring has its own sub-config).
HIDDEN = {"follow_long_forms"}
# Keys of configs written before 0.2, still read with one deprecation warning.
FLAT_ENCODER_KEYS = {"model": "model", "precision": "precision", "pooling": "pooling", "max_length": "max_length",
                     "device": "device", "threads": "threads", "encoder_batch_size": "batch_size"}
FLAT_SCORING_KEYS = ("sparse_weight", "marginal_tau", "exact_first", "exact_match")
FLAT_ATTRIBUTE_KEYS = {"cui_attr": "cui", "score_attr": "score", "candidates_attr": "candidates"}
# scispaCy's linker key that has no counterpart here: read only to say what to write instead.
SCISPACY_KEYS = ("linker_name",)
LEGACY_KEYS = (*FLAT_ENCODER_KEYS, *FLAT_SCORING_KEYS, *FLAT_ATTRIBUTE_KEYS, "follow_long_forms", *SCISPACY_KEYS)


def _users_line() -> int:
    """The stacklevel, for a warnings.warn in the caller, of the first frame outside this package
    and the libraries that call it (spaCy, confection, thinc): a warning names the user's line."""
    import confection
    import spacy
    import thinc

    libraries = tuple(str(Path(module.__file__).parent) for module in (sys.modules[__package__.split(".")[0]],
                                                                        spacy, confection, thinc))
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(libraries):
        frame, level = frame.f_back, level + 1
    return level


def _config_fields():
    return [f for kind in SETTINGS[:2] for f in dataclasses.fields(kind) if f.name not in HIDDEN]


def _defaults() -> dict:
    values = {**dataclasses.asdict(CandidateSettings()), **dataclasses.asdict(PipeSettings())}
    return {f.name: values[f.name] for f in _config_fields()}


def _settings_signature(factory: Callable) -> Callable:
    """Give `factory` (which takes the knobs as **settings) a signature that lists every config
    key of SETTINGS, so that spaCy's config validation knows them: the knobs are written once, in
    the dataclasses. **settings stays, to read the keys of older configs."""
    signature = inspect.signature(factory)
    fixed = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    defaults = _defaults()
    knobs = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=defaults[f.name], annotation=f.type)
             for f in _config_fields()]
    # Read from older configs (saved pipelines); null, and left out of the filled config.
    legacy = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[Any])
              for key in LEGACY_KEYS]
    factory.__signature__ = signature.replace(parameters=fixed + knobs + legacy)
    factory.__annotations__ = {**factory.__annotations__, **{p.name: p.annotation for p in knobs + legacy}}
    return factory


class _PipeConfigs(dict):
    """A pipeline's `_pipe_configs` once it has a sapbert_linker: the keys of configs written
    before 0.2, read when given and null otherwise, are left out of its filled config, so that
    `nlp.config` shows the keys of today only."""

    def __setitem__(self, name: str, config) -> None:
        if config.get("factory") == "sapbert_linker":
            for key in LEGACY_KEYS:
                if key in config and config[key] is None:
                    del config[key]
        super().__setitem__(name, config)


# The linker's scorer, registered as spaCy's entity_linker registers its own.
SCORER = "spacy-sapbert.linker_scorer.v1"


def score_links(examples: Iterable, **kwargs) -> Dict[str, object]:
    """Link precision, recall and F1 (`nel_micro_p/r/f`, `nel_f_per_type`) as spaCy's own
    entity_linker reports them, so `spacy evaluate` and `nlp.evaluate` show linking: over the
    entities whose spans the reference shares, a predicted `kb_id_` against the reference's
    (NIL, no concept, is "" or "NIL")."""
    from spacy.scorer import Scorer

    return Scorer.score_links(examples, negative_labels=["", "NIL"], **kwargs)


@registry.scorers(SCORER)
def make_linker_scorer() -> Callable:
    return score_links


@Language.factory(
    "sapbert_linker",
    # as spaCy's entity_linker declares them, so that nlp.analyze_pipes() flags a linker with no NER
    requires=["doc.ents", "token.ent_iob", "token.ent_type"],
    assigns=["doc.ents", "token.ent_kb_id", "span._.cui", "span._.cui_score", "span._.kb_ents"],
    default_score_weights={"nel_micro_f": 1.0, "nel_micro_r": None, "nel_micro_p": None},
    default_config={"encoder": ENCODER_CONFIG, "index": INDEX_CONFIG, "scoring": SCORING_CONFIG,
                    "scorer": {"@scorers": SCORER}, **_defaults()},
)
@_settings_signature
def make_sapbert_linker(nlp: Language, name: str, encoder: EncoderLoader, index: Union[IndexLoader, str],
                        scoring: Scoring, scorer: Optional[Callable] = None, **settings) -> "SapBERTLinker":
    """Create the linker; it loads nothing until `initialize`, `from_disk` or first use.

    encoder, index, scoring: the registered sub-configs (`pipe.loaders`). scorer: what
    `nlp.evaluate` calls (SCORER, as spaCy's entity_linker has its own). settings: the knobs of
    `candidates.CandidateSettings` and `PipeSettings` (README, Config).
    """
    linker = SapBERTLinker(nlp.vocab, name, encoder=encoder, index=index, scoring=scoring, scorer=scorer, **settings)
    if not _built_from_config():
        linker.encoder_loader.check_source()
        linker.index_loader.check_source()
    linker.nlp = nlp
    if not isinstance(nlp._pipe_configs, _PipeConfigs):
        nlp._pipe_configs = _PipeConfigs(nlp._pipe_configs)
    _check_labels_against_ner(nlp, linker.labels)
    return linker


def _built_from_config() -> bool:
    """Whether the pipe is being made by spaCy's Language.from_config (spacy.load, a saved
    pipeline, a training config) rather than by a user's add_pipe. A saved pipeline's config
    keeps the model and index paths it was made with, which need not exist where it is loaded:
    its own copies come from from_disk. So those paths are checked at add_pipe, and, from a
    config, when the pipe first loads (initialize or the first document)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "from_config" and Path(code.co_filename).parent.name == "spacy":
            return True
        frame = frame.f_back
    return False


def _check_labels_against_ner(nlp: Language, labels: Iterable[str]) -> None:
    """A label in `labels` that the pipeline's trained NER never predicts is a typo: refuse it
    (labels compare in any case). Nothing is checked before an NER with labels is added."""
    known = {label for _, pipe in nlp.pipeline if type(pipe).__name__ in ("EntityRecognizer", "SapbertNER")
             for label in getattr(pipe, "labels", ())}
    unknown = [label for label in labels if known and label.lower() not in {k.lower() for k in known}]
    if unknown:
        raise ValueError(f"labels lists {unknown[0]!r}, which the pipeline's NER does not predict (it predicts "
                         f"{', '.join(sorted(known))}); fix labels in the sapbert_linker config.")


def _stored(candidates_attr: str) -> str:
    return f"{candidates_attr}_stored"


def _candidates_getter(candidates_attr: str) -> Callable[[Span], List[Tuple[str, float]]]:
    store = _stored(candidates_attr)

    def candidates(span: Span) -> List[Tuple[str, float]]:
        return [tuple(pair) for pair in (span._.get(store) or [])]

    candidates.sapbert_store = store  # marks the getter as ours
    return candidates


def _register_extensions(cui_attr: str, score_attr: str, *candidate_attrs: str) -> Dict[str, str]:
    """Register the Span extensions; return, for each of `candidate_attrs`, the stored
    attribute behind it, or the attribute itself where another package (scispaCy's linker)
    registered it first, in which case the candidates are set on it directly. Stored behind a
    getter, candidates come back as (concept_id, score) tuples from nlp.pipe(n_process=2) too,
    whose workers return them as lists."""
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


def _legacy_keys(encoder: Optional[EncoderLoader], index, scoring: Optional[Scoring], settings: dict):
    """(encoder loader, index loader, scoring) with the keys of a config written before 0.2 (flat
    `model`, `precision`, …, `index` as a string, flat scoring and attribute names) moved where
    they belong now, with one deprecation warning; `settings` loses those keys (null ones are
    what a filled config of today holds)."""
    for key in LEGACY_KEYS:
        if key in settings and settings[key] is None:
            del settings[key]
    if "linker_name" in settings:
        from ..kb.named import NAMED_KBS

        wanted = str(settings["linker_name"])
        name = wanted if wanted in NAMED_KBS else "umls:META_FOLDER" if wanted == "umls" else "default"
        raise ValueError(f"linker_name ({settings['linker_name']!r}) is scispaCy's key; sapbert_linker searches the "
                         f"index its `index` sub-config names: config={{\"index\": {{\"index\": \"{name}\"}}}}, "
                         f"with \"default\", a knowledge base by name ({', '.join(NAMED_KBS)}, umls:META_FOLDER) "
                         "or a directory from `spacy-sapbert build-index`.")
    flat = {FLAT_ENCODER_KEYS[key]: settings.pop(key) for key in list(settings) if key in FLAT_ENCODER_KEYS}
    flat_scoring = {key: settings.pop(key) for key in FLAT_SCORING_KEYS if key in settings}
    attributes = {FLAT_ATTRIBUTE_KEYS[key]: settings.pop(key) for key in list(settings) if key in FLAT_ATTRIBUTE_KEYS}
    if flat or flat_scoring or attributes or isinstance(index, (str, Path)) or "follow_long_forms" in settings:
        legacy = ", ".join(key for key in LEGACY_KEYS if key not in SCISPACY_KEYS)
        warnings.warn(f"sapbert_linker's flat keys ({legacy}, and index = \"…\") are deprecated since 0.2: write "
                      "them in its [encoder], [index] and [scoring] sub-configs and `attributes` (CHANGELOG.md).",
                      FutureWarning, stacklevel=_users_line())
    if attributes:
        settings["attributes"] = {**ATTRIBUTES, **settings.get("attributes", {}), **attributes}
    encoder = dataclasses.replace(encoder or EncoderLoader(), **flat)
    index = IndexLoader(str(index)) if isinstance(index, (str, Path)) else (index or IndexLoader())
    scoring = dataclasses.replace(scoring or Scoring(), **flat_scoring)
    return encoder, index, scoring


def _split_settings(settings: dict) -> tuple:
    """(CandidateSettings, PipeSettings) from the factory's remaining keys; one sentence for a key
    that is none of them."""
    parts = []
    for kind in SETTINGS[:2]:
        names = {f.name for f in dataclasses.fields(kind)}
        parts.append(kind(**{key: settings.pop(key) for key in list(settings) if key in names}))
    if settings:
        known = sorted(f.name for f in _config_fields())
        raise ValueError(f"sapbert_linker has no setting {sorted(settings)[0]!r}; its settings are "
                         f"{', '.join(known)}, and the encoder, index and scoring sub-configs.")
    return tuple(parts)


class SapBERTLinker(Pipe):
    """Link entities to concepts: embed each mention, search the concept index, set
    `span._.cui`, `span._.cui_score`, `span._.kb_ents` and `span.kb_id_`. Every knob of
    CandidateSettings, PipeSettings and Scoring reads and writes as an attribute
    (`linker.threshold = 0.5`, `linker.sparse_weight = 0.9`); a change takes effect at once (the
    remembered candidates are forgotten)."""

    def __init__(self, vocab, name: str = "sapbert_linker", *, encoder: Optional[EncoderLoader] = None,
                 index: Union[IndexLoader, str, None] = None, scoring: Optional[Scoring] = None,
                 scorer: Optional[Callable] = None, **settings):
        settings = dict(settings)
        self.scorer = scorer or score_links
        encoder, index, scoring = _legacy_keys(encoder, index, scoring, settings)
        object.__setattr__(self, "_knobs", (*_split_settings(settings), scoring))
        self.vocab = vocab
        self.name = name
        self.encoder_loader, self.index_loader = encoder, index
        self.generator: Optional[CandidateGenerator] = None
        self.nlp: Optional[Language] = None  # the pipeline it belongs to (the factory sets it)
        self._compact: Optional[Path] = None  # the compact index a searched graph was built over
        self._checked: set = set()  # the pipeline checks done (_check_pipeline), each once
        self._stores = _register_extensions(self.cui_attr, self.score_attr, self.candidates_attr,
                                            self.attributes["nil_candidates"])

    def __getattr__(self, name: str):
        for knobs in self.__dict__.get("_knobs", ()):
            if name in knobs.__dataclass_fields__:
                return getattr(knobs, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        for knobs in self.__dict__.get("_knobs", ()):
            if name in knobs.__dataclass_fields__:
                if name == "attributes":
                    raise AttributeError("attributes cannot change on a live pipe (the Span extensions are "
                                         "registered); set it in the sapbert_linker config.")
                old = getattr(knobs, name)
                setattr(knobs, name, value)
                try:
                    knobs.__post_init__()
                except ValueError:
                    setattr(knobs, name, old)
                    raise
                if self.__dict__.get("generator") is not None:
                    self.generator.clear_cache()
                return
        object.__setattr__(self, name, value)

    @property
    def cui_attr(self) -> str:
        return self.attributes["cui"]

    @property
    def score_attr(self) -> str:
        return self.attributes["score"]

    @property
    def candidates_attr(self) -> str:
        return self.attributes["candidates"]

    @property
    def labels(self) -> List[str]:
        """The entity labels linked (PipeSettings; spaCy's Pipe has a `labels` of its own, which
        would answer before __getattr__)."""
        return self._knobs[1].labels

    # -- loading --------------------------------------------------------------------------

    @property
    def kb(self):
        """The knowledge base of the index (`cui_to_entity`, `alias_to_cuis`)."""
        return self._loaded().index.kb

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The id the linker gives for `concept_id`: its own, the index's for an alternative id,
        or for an older id the names table maps (`index.names`); None where none holds it."""
        return self._loaded().resolve_id(concept_id)

    @property
    def encoder(self):
        return self._loaded().encoder

    @property
    def index(self):
        return self._loaded().index

    @property
    def hybrid(self):
        """The hybrid score's rescorer (ranking.hybrid.HybridRescorer) at the current sparse weight, or None when dense only."""
        return self._loaded().hybrid

    def _load(self, model: Optional[Path] = None, graph_over: Optional[Path] = None) -> None:
        """Load the encoder and index (a saved pipeline's `model` and compact index in place of
        the configured ones), building the default index's graph on first use."""
        encoder_loader = self.encoder_loader
        if model is not None:
            encoder_loader = dataclasses.replace(encoder_loader, model=str(model))
        self.generator = CandidateGenerator.load(encoder_loader, self.index_loader, self._knobs[0], self._knobs[2],
                                                 graph_over=graph_over)
        from ..search.resolve import compact_source

        # What to_disk writes: the compact codes the graph was built over (54 MB), not the graph.
        self._compact = graph_over or compact_source(self.generator.index.path)
        self._check_label_types()

    def _loaded(self) -> CandidateGenerator:
        if self.generator is None:
            self._load()
        return self.generator

    def _label_types(self) -> Dict[str, List[str]]:
        if self.label_types is None:
            return self._loaded().index.meta.get("label_types", {})
        return self.label_types

    def _types_by_label(self) -> Dict[str, Tuple[str, ...]]:
        """Lower-cased entity label → allowed type prefixes: scispaCy's en_ner_bc5cdr_md says
        DISEASE and CHEMICAL where the bundled index says Disease and Chemical."""
        return {label.lower(): tuple(prefixes) for label, prefixes in self._label_types().items()}

    def _check_label_types(self) -> None:
        if self.label_types is not None:
            check_label_types(self.label_types, "sapbert_linker's label_types")
        index = self.generator.index
        for label, prefixes in self._label_types().items():
            if prefixes and index.allowed_rows(prefixes) == 0:
                raise ConceptIndexError(
                    f"label_types maps {label!r} to types {list(prefixes)}, but no concept in the index "
                    f"{str(self.index_loader.index)!r} has such a type; fix label_types or set it to {{}} to "
                    "search every concept."
                )

    def initialize(self, get_examples: Optional[Callable] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the model and the index (building the default index on first use)."""
        self._load()

    # -- linking --------------------------------------------------------------------------

    def _detector_runs_first(self) -> bool:
        """Whether a scispaCy AbbreviationDetector runs before this pipe: only then are the
        definitions it misses added, so that a pipeline without one resolves nothing, whatever
        another pipeline of the process registered."""
        from .abbreviation_detector import AbbreviationDetector

        for _, pipe in self.nlp.pipeline if self.nlp is not None else ():
            if pipe is self:
                break
            if isinstance(pipe, AbbreviationDetector):
                return True
        return False

    def _check_pipeline(self, docs: List[Doc]) -> None:
        """One warning for each way this pipeline would link less without a word, once per pipe:
        abbreviations to resolve but no detector before it, a span group the documents lack, or
        no entities because the component that sets them runs after it."""
        checked = self._checked
        if "abbreviations" not in checked and self.nlp is not None:
            checked.add("abbreviations")
            if self.resolve_abbreviations and not self._detector_runs_first():
                warnings.warn(f"{self.name} resolves abbreviations only after an abbreviation detector, and none runs "
                              f"before it, so \"NIDDM\" is linked as written; add nlp.add_pipe(\"abbreviation_detector\", "
                              f"before=\"{self.name}\"), or set resolve_abbreviations to false.", UserWarning, stacklevel=_users_line())
        if self.spans_key and "spans_key" not in checked and any(self.spans_key not in doc.spans for doc in docs):
            checked.add("spans_key")
            warnings.warn(f"{self.name} links the span group doc.spans[{self.spans_key!r}] (spans_key), which a "
                          "document lacks, so nothing is linked there; set spans_key to the group your NER fills, "
                          "or to null to link doc.ents.", UserWarning, stacklevel=_users_line())
        if "order" not in checked and not self.spans_key and self.nlp is not None and docs and not any(d.ents for d in docs):
            names = [name for name, _ in self.nlp.pipeline]
            later = [name for name in names[names.index(self.name) + 1:] if self.name in names
                     and "doc.ents" in self.nlp.get_pipe_meta(name).assigns]
            if later:
                checked.add("order")
                warnings.warn(f"{self.name} runs before {later[0]!r}, which sets doc.ents, so it finds no entities to "
                              f"link; add it after: nlp.add_pipe(\"{self.name}\", after=\"{later[0]}\").",
                              UserWarning, stacklevel=_users_line())

    def _mentions(self, doc: Doc) -> Tuple[List[Span], List[Optional[Mention]]]:
        """The entities to annotate (put right by the long forms where asked) and, for each, the
        mention it is linked as (text, type prefixes), or None when its label is not linked."""
        spans = doc.spans.get(self.spans_key, []) if self.spans_key else doc.ents
        generator = self._loaded()
        forms = (long_forms(doc, missed=self._detector_runs_first(), entities=spans, is_name=generator.holds_name)
                 if self.resolve_abbreviations else {})
        ents = follow_long_forms(spans, forms) if self.follow_long_forms else list(spans)
        abbreviations = {short: form.text for short, form in forms.items()}
        types_by_label = self._types_by_label()
        link_labels = {label.lower() for label in self.labels}
        context = getattr(generator.encoder, "context", None)

        def mention(ent: Span) -> Mention:
            types = types_by_label.get(ent.label_.lower(), ())
            expanded = linked_text(ent.text, abbreviations, lambda written: generator.holds_name(written, types))
            if context is not None:
                # A model trained on contexts encodes the mention in its sentence, as it trained.
                expanded = in_window(doc, ent.start, ent.end, context["window"], expanded)
            return expanded, types

        return ents, [mention(ent) if not link_labels or ent.label_.lower() in link_labels else None for ent in ents]

    def predict(self, docs: List[Doc]) -> List[Tuple[List[Span], List[Optional[Tuple[Candidates, Candidates]]]]]:
        """For each doc, the entities to annotate (put right by the long forms) and, for each,
        (its candidates, those of a NIL entity: what it had below the threshold), or None for an
        entity whose label is not linked; from one generator call over the batch's mentions."""
        generator = self._loaded()
        self._check_pipeline(docs)
        wanted = [self._mentions(doc) for doc in docs]
        distinct = sorted({key for _, keys in wanted for key in keys if key is not None})
        found = {}
        for key, ranked in zip(distinct, generator.ranked(distinct)):
            kept = generator.select(ranked)
            found[key] = (kept, [] if kept else ranked[: self.max_entities_per_mention])
        return [(ents, self._follow_parentheticals(doc, ents, [found[key] if key is not None else None for key in keys]))
                for doc, (ents, keys) in zip(docs, wanted)]

    def _follow_parentheticals(self, doc: Doc, ents: List[Span], found: List[Optional[Tuple[Candidates, Candidates]]]):
        """`found` after the parenthetical pairs of `parenthetical_labels` share the surer one's
        candidates (mentions.parenthetical)."""
        labels = {label.lower() for label in self.parenthetical_labels}
        if not labels:
            return found

        def top(ent: Span, candidates) -> Optional[float]:
            best = (candidates[0] or candidates[1]) if candidates is not None else None
            return best[0][1] if best and ent.label_.lower() in labels else None

        placed = [(ent.start_char, ent.end_char, ent.text) for ent in ents]
        sources = parenthetical_sources(doc.text, placed, [top(ent, c) for ent, c in zip(ents, found)], is_short_form)
        return [found[sources[i]] if i in sources else candidates for i, candidates in enumerate(found)]

    def set_annotations(self, docs: List[Doc], predicted: List[Tuple[List[Span], List[Optional[Candidates]]]]) -> None:
        """Set `kb_id_`, then the Span extensions (in that order: a span's extension values
        are keyed by its kb_id, so setting them first would lose them)."""
        for doc, (ents, doc_candidates) in zip(docs, predicted):
            spans = [ent if found is None else Span(doc, ent.start, ent.end, label=ent.label,
                                                     kb_id=found[0][0][0] if found[0] else "")
                     for ent, found in zip(ents, doc_candidates)]
            if self.spans_key:
                doc.spans[self.spans_key] = spans
                spans = doc.spans[self.spans_key]
            else:
                doc.ents = spans
                spans = doc.ents
            for ent, found in zip(spans, doc_candidates):
                if found is not None:
                    cands, nil = found
                    ent._.set(self._stores[self.candidates_attr], cands)
                    ent._.set(self._stores[self.attributes["nil_candidates"]], nil)
                    ent._.set(self.cui_attr, cands[0][0] if cands else None)
                    ent._.set(self.score_attr, cands[0][1] if cands else None)

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc], self.predict([doc]))
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: Optional[int] = None) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size or self.batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    def score(self, examples: Iterable, **kwargs) -> Dict[str, object]:
        """What the config's scorer gives (SCORER: link precision, recall and F1)."""
        return self.scorer(examples, **kwargs)

    # -- serialisation --------------------------------------------------------------------

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Write the model and the index into `path`, so the pipeline needs neither original.
        exclude: any of SERIALIZED ("model", "index", "names", "cfg"), left unwritten; the pipe
        that reads them back with the same exclude takes its config's instead."""
        exclude = set(exclude)
        generator = self._loaded()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if "model" not in exclude:
            generator.encoder.save(path / MODEL_DIR)
        cfg = {"pooling": generator.encoder.pooling, "max_length": self.encoder_loader.max_length,
               "precision": getattr(generator.encoder, "precision", "fp32")}
        if "index" not in exclude and self._compact is not None:
            if (path / INDEX_DIR).resolve() != Path(self._compact).resolve():
                shutil.copytree(self._compact, path / INDEX_DIR, dirs_exist_ok=True)
            cfg["index_graph_over_codes"] = True
        elif "index" not in exclude:
            generator.index.save(path / INDEX_DIR)
        if self.index_loader.names is not None and "names" not in exclude:
            names = Path(self.index_loader.names).expanduser()
            cfg["names"] = NAMES_FILE + (".gz" if names.suffix == ".gz" else "")
            shutil.copyfile(names, path / cfg["names"])
        if "cfg" not in exclude:
            srsly.write_json(path / CFG_FILE, cfg)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "SapBERTLinker":
        """Load the model and index written by `to_disk` (those not in `exclude`, which come from
        the pipe's config instead)."""
        exclude = set(exclude)
        path = Path(path)
        missing = [f"{folder}/" for field, folder in (("model", MODEL_DIR), ("index", INDEX_DIR))
                   if field not in exclude and not (path / folder).exists()]
        if missing:
            raise ConceptIndexError(
                f"{path} lacks the {' and '.join(missing)} folder{'s' if len(missing) > 1 else ''} that "
                "sapbert_linker writes; save the pipeline again with nlp.to_disk."
            )
        cfg = srsly.read_json(path / CFG_FILE) if "cfg" not in exclude and (path / CFG_FILE).exists() else {}
        self.encoder_loader = dataclasses.replace(
            self.encoder_loader, pooling=cfg.get("pooling", self.encoder_loader.pooling),
            precision=cfg.get("precision", self.encoder_loader.precision))
        # The saved index and names, with the pipe's other index settings (shipped_names, scheme, supplement).
        saved = {}
        if "index" not in exclude:
            saved["index"] = str(path / INDEX_DIR)
        if "names" not in exclude:
            saved["names"] = str(path / cfg["names"]) if cfg.get("names") else None
        self.index_loader = dataclasses.replace(self.index_loader, **saved)
        graph_over = path / INDEX_DIR if cfg.get("index_graph_over_codes") and "index" not in exclude else None
        self._load(model=None if "model" in exclude else path / MODEL_DIR, graph_over=graph_over)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """What to_disk writes, its files in one msgpack map (the bundled index makes that
        about 100 MB: nlp.to_disk keeps it on disk)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sapbert-linker-") as folder:
            self.to_disk(folder, exclude=exclude)
            files = {str(f.relative_to(folder)): f.read_bytes() for f in sorted(Path(folder).rglob("*")) if f.is_file()}
        return srsly.msgpack_dumps(files)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "SapBERTLinker":
        """Read what to_bytes wrote: its files are unpacked into a folder of their own, which the
        index maps, removed when the pipe is."""
        import tempfile
        import weakref

        folder = Path(tempfile.mkdtemp(prefix="sapbert-linker-"))
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        for name, data in srsly.msgpack_loads(bytes_data).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        return self.from_disk(folder, exclude=exclude)
