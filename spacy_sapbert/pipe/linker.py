"""The `sapbert_linker` pipe: collect the entities (or a span group), link them through a
`candidates.CandidateGenerator`, set the annotations, as scispaCy's linker does around its
candidate generator. The knobs are `candidates.CandidateSettings` and `settings.PipeSettings`,
each a parameter of the factory; the encoder, the index and the scoring come from the
registered sub-configs of `pipe.loaders`."""
import dataclasses
import gc
import logging
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import srsly
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.util import minibatch, registry

from ..mentions.abbreviations import (follow_long_forms, linked_text, long_forms, repeated_entities,
                                      short_form_entities)
from ..candidates import CandidateGenerator, Candidates, CandidateSettings, Mention, Scoring
from ..encoders.base import in_window
from ..mentions.parenthetical import share_parentheticals
from ..search.index import ConceptIndexError, check_label_types
from .extensions import register_extensions
from .loaders import ENCODER_CONFIG, INDEX_CONFIG, SCORING_CONFIG, EncoderLoader, IndexLoader
from .settings import PipeSettings, Setting, users_line

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
                    "scorer": {"@scorers": SCORER}, **dataclasses.asdict(CandidateSettings()),
                    **dataclasses.asdict(PipeSettings())},
)
def make_sapbert_linker(
    nlp: Language,
    name: str,
    encoder: EncoderLoader,
    index: IndexLoader,
    scoring: Scoring,
    scorer: Optional[Callable],
    k: int,
    threshold: float,
    max_entities_per_mention: int,
    filter_for_definitions: bool,
    no_definition_threshold: float,
    cache_size: int,
    resolve_abbreviations: bool,
    labels: List[str],
    label_types: Optional[Dict[str, List[str]]],
    spans_key: Optional[str],
    batch_size: int,
    attributes: Dict[str, str],
    parenthetical_labels: List[str],
    short_form_entities: bool,
    repeated_entities: bool,
    drop_unlinked: bool,
) -> "SapBERTLinker":
    """Create the linker; it loads nothing until `initialize`, `from_disk` or first use, which
    also check the encoder's and the index's sources.

    encoder, index, scoring: the registered sub-configs (`pipe.loaders`). scorer: what
    `nlp.evaluate` calls (SCORER, as spaCy's entity_linker has its own). The rest: the knobs of
    `candidates.CandidateSettings` and `settings.PipeSettings` (README, Config).
    """
    candidates = CandidateSettings(k=k, threshold=threshold, max_entities_per_mention=max_entities_per_mention,
                                   filter_for_definitions=filter_for_definitions,
                                   no_definition_threshold=no_definition_threshold, cache_size=cache_size)
    settings = PipeSettings(resolve_abbreviations=resolve_abbreviations, labels=labels, label_types=label_types,
                            spans_key=spans_key, batch_size=batch_size, attributes=attributes,
                            parenthetical_labels=parenthetical_labels, short_form_entities=short_form_entities,
                            repeated_entities=repeated_entities, drop_unlinked=drop_unlinked)
    linker = SapBERTLinker(nlp.vocab, name, encoder=encoder, index=index, scoring=scoring, scorer=scorer,
                           candidates=candidates, settings=settings)
    linker.nlp = nlp
    _check_labels_against_ner(nlp, linker.labels)
    return linker


def _check_labels_against_ner(nlp: Language, labels: Iterable[str]) -> None:
    """A label in `labels` that the pipeline's trained NER never predicts is a typo: refuse it
    (labels compare in any case). Nothing is checked before an NER with labels is added."""
    known = {label for _, pipe in nlp.pipeline if type(pipe).__name__ in ("EntityRecognizer", "SapbertNER")
             for label in getattr(pipe, "labels", ())}
    unknown = [label for label in labels if known and label.lower() not in {k.lower() for k in known}]
    if unknown:
        raise ValueError(f"labels lists {unknown[0]!r}, which the pipeline's NER does not predict (it predicts "
                         f"{', '.join(sorted(known))}); fix labels in the sapbert_linker config.")


def _opens_parenthesis(doc: Doc, end: int) -> bool:
    """Whether the first token after doc[end - 1] that is not whitespace opens a parenthesis:
    where a mention ends that the parenthetical rule may pair with the next (mentions.parenthetical)."""
    while end < len(doc) and doc[end].is_space:
        end += 1
    return end < len(doc) and doc[end].text.startswith("(")


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while the encoder, the index and its tables load (on again
    after, if it was on): the load's short-lived objects (the concepts' JSON among them) set off
    three full collections, each walking every object of the process, 0.2 s of a 1.5 s cold
    start; the load keeps about 21,000 objects the collector tracks, collected as usual after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class SapBERTLinker(Pipe):
    """Link entities to concepts: embed each mention, search the concept index, set
    `span._.cui`, `span._.cui_score`, `span._.kb_ents` and `span.kb_id_`. Every knob of
    CandidateSettings, PipeSettings and Scoring reads and writes as an attribute
    (`linker.threshold = 0.5`, `linker.sparse_weight = 0.9`); a change takes effect at once (the
    remembered candidates are forgotten)."""

    k = Setting("candidate_settings")
    threshold = Setting("candidate_settings")
    max_entities_per_mention = Setting("candidate_settings")
    filter_for_definitions = Setting("candidate_settings")
    no_definition_threshold = Setting("candidate_settings")
    cache_size = Setting("candidate_settings")
    resolve_abbreviations = Setting("pipe_settings")
    labels = Setting("pipe_settings")
    label_types = Setting("pipe_settings")
    spans_key = Setting("pipe_settings")
    batch_size = Setting("pipe_settings")
    parenthetical_labels = Setting("pipe_settings")
    short_form_entities = Setting("pipe_settings")
    repeated_entities = Setting("pipe_settings")
    drop_unlinked = Setting("pipe_settings")
    sparse_weight = Setting("scoring")
    marginal_tau = Setting("scoring")
    exact_first = Setting("scoring")
    exact_match = Setting("scoring")

    def __init__(self, vocab, name: str = "sapbert_linker", *, encoder: Optional[EncoderLoader] = None,
                 index: Optional[IndexLoader] = None, scoring: Optional[Scoring] = None,
                 scorer: Optional[Callable] = None, candidates: Optional[CandidateSettings] = None,
                 settings: Optional[PipeSettings] = None):
        self.vocab = vocab
        self.name = name
        self.scorer = scorer or score_links
        self.encoder_loader, self.index_loader = encoder or EncoderLoader(), index or IndexLoader()
        self.candidate_settings = candidates or CandidateSettings()
        self.pipe_settings = settings or PipeSettings()
        self.scoring = scoring or Scoring()
        self.generator: Optional[CandidateGenerator] = None
        self.nlp: Optional[Language] = None  # the pipeline it belongs to (the factory sets it)
        self._compact: Optional[Path] = None  # the compact index a searched graph was built over
        self._checked: set = set()  # the pipeline checks done (_check_pipeline), each once
        self._stores = register_extensions(self.cui_attr, self.score_attr, self.candidates_attr,
                                           self.attributes["nil_candidates"])

    def settings_changed(self) -> None:
        """A knob changed (Setting): the remembered candidates are forgotten."""
        if self.generator is not None:
            self.generator.clear_cache()

    @property
    def attributes(self) -> Dict[str, str]:
        """The Span extensions' names (PipeSettings.attributes); fixed once the pipe is made."""
        return self.pipe_settings.attributes

    @attributes.setter
    def attributes(self, value) -> None:
        raise AttributeError("attributes cannot change on a live pipe (the Span extensions are registered); set it in "
                             "the sapbert_linker config.")

    @property
    def cui_attr(self) -> str:
        return self.attributes["cui"]

    @property
    def score_attr(self) -> str:
        return self.attributes["score"]

    @property
    def candidates_attr(self) -> str:
        return self.attributes["candidates"]

    # -- loading --------------------------------------------------------------------------

    @property
    def kb(self):
        """The knowledge base of the index (`cui_to_entity`, `alias_to_cuis`)."""
        return self._loaded().index.kb

    def canonical_name(self, concept_id: str) -> Optional[str]:
        """The canonical name of a concept of the index, None for any other id: what
        `kb.cui_to_entity[concept_id].canonical_name` gives, without reading the whole KB where the
        index can say it alone (the bundled index: 0.2 s against 1 s and 50 MB)."""
        if not isinstance(concept_id, str):  # a NIL entity's cui (None) names nothing
            return None
        index = self._loaded().index
        if hasattr(index, "canonical_name"):
            return index.canonical_name(concept_id)
        concept = index.kb.cui_to_entity.get(concept_id)
        return concept.canonical_name if concept is not None else None

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The id the linker gives for `concept_id`: its own, the index's for an alternative id,
        or for an older id the names table maps (`index.names`); None where none holds it."""
        if not isinstance(concept_id, str):
            return None
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
        else:  # one sentence for a source that is not there, before anything is fetched or built
            encoder_loader.check_source()
        self.index_loader.check_source()
        with _no_cycle_collection():
            self.generator = CandidateGenerator.load(encoder_loader, self.index_loader, self.candidate_settings,
                                                     self.scoring, graph_over=graph_over)
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
                              f"before it, so a short form such as \"NIDDM\" is linked as written; add nlp.add_pipe(\"abbreviation_detector\", "
                              f"before=\"{self.name}\"), or set resolve_abbreviations to false.", UserWarning, stacklevel=users_line())
        if self.spans_key and "spans_key" not in checked and any(self.spans_key not in doc.spans for doc in docs):
            checked.add("spans_key")
            warnings.warn(f"{self.name} links the span group doc.spans[{self.spans_key!r}] (spans_key), which a "
                          "document lacks, so nothing is linked there; set spans_key to the group your NER fills, "
                          "or to null to link doc.ents.", UserWarning, stacklevel=users_line())
        if "order" not in checked and not self.spans_key and self.nlp is not None and docs and not any(d.ents for d in docs):
            names = [name for name, _ in self.nlp.pipeline]
            later = [name for name in names[names.index(self.name) + 1:] if self.name in names
                     and "doc.ents" in self.nlp.get_pipe_meta(name).assigns]
            if later:
                checked.add("order")
                warnings.warn(f"{self.name} runs before {later[0]!r}, which sets doc.ents, so it finds no entities to "
                              f"link; add it after: nlp.add_pipe(\"{self.name}\", after=\"{later[0]}\").",
                              UserWarning, stacklevel=users_line())

    def _mentions(self, doc: Doc) -> Tuple[List[Span], List[Optional[Mention]]]:
        """The entities to annotate (put right by the long forms where asked) and, for each, the
        mention it is linked as (text, type prefixes), or None when its label is not linked."""
        spans = doc.spans.get(self.spans_key, []) if self.spans_key else doc.ents
        if self.repeated_entities:
            spans = repeated_entities(spans)
        generator = self._loaded()
        forms = (long_forms(doc, missed=self._detector_runs_first(), entities=spans, is_name=generator.holds_name)
                 if self.resolve_abbreviations else {})
        ents = follow_long_forms(spans, forms)
        if self.short_form_entities:
            ents = short_form_entities(ents, forms)
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

        tops = [top(ent, c) for ent, c in zip(ents, found)]
        if not any(score is not None and _opens_parenthesis(doc, ent.end) for ent, score in zip(ents, tops)):
            return found  # no pair "A (B)" to share in: spare building doc.text (a tenth of a call)
        placed = [(ent.start_char, ent.end_char, ent.text) for ent in ents]
        return share_parentheticals(doc.text, placed, found, tops)

    def set_annotations(self, docs: List[Doc], predicted: List[Tuple[List[Span], List[Optional[Candidates]]]]) -> None:
        """Set `kb_id_`, then the Span extensions (in that order: a span's extension values
        are keyed by its kb_id, so setting them first would lose them)."""
        for doc, (ents, doc_candidates) in zip(docs, predicted):
            if self.drop_unlinked:  # an entity this pipe links that found no concept above the threshold goes
                kept = [found is None or bool(found[0]) for found in doc_candidates]
                ents = [ent for ent, keep in zip(ents, kept) if keep]
                doc_candidates = [found for found, keep in zip(doc_candidates, kept) if keep]
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
        # At most the pipe's own batch_size: nlp.pipe hands over 1,000 documents by default.
        for docs in minibatch(stream, size=min(batch_size or self.batch_size, self.batch_size)):
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
