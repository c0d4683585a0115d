"""The `sapbert_linker` pipe: link `doc.ents` to ontology concepts by embedding search."""
import logging
import re
import shutil
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import srsly
from spacy.lang.en.stop_words import STOP_WORDS
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.util import minibatch

from .assets import DEFAULT, resolve_model
from .resources import resolve_index
from .index import Candidates, ConceptIndex, ConceptIndexError, check_label_types
from .kb import name_key

logger = logging.getLogger(__name__)
# scispaCy's AbbreviationDetector runs an empty Matcher on every document without a definition,
# and spaCy warns (W036) each time; only that warning, from that module, is silenced.
warnings.filterwarnings("ignore", message=r"\[W036\]", module=r"scispacy\.abbreviation")

MODEL_DIR = "model"
INDEX_DIR = "index"
CFG_FILE = "cfg.json"


@Language.factory(
    "sapbert_linker",
    assigns=["doc.ents", "span._.cui", "span._.cui_score", "span._.kb_ents"],
    default_config={
        "model": DEFAULT,
        "index": DEFAULT,
        "k": 10,
        "threshold": 0.7,
        "max_entities_per_mention": 5,
        "filter_for_definitions": False,
        "no_definition_threshold": 0.95,
        "spans_key": None,
        "resolve_abbreviations": True,
        "follow_long_forms": True,
        "labels": [],
        "label_types": None,
        "batch_size": 256,
        "encoder_batch_size": 32,
        "cache_size": 10000,
        "exact_match": False,
        "precision": "int8",
        "threads": 0,
        "pooling": "auto",
        "max_length": 25,
        "device": "cpu",
        "sparse_weight": None,
        "cui_attr": "cui",
        "score_attr": "cui_score",
        "candidates_attr": "kb_ents",
    },
)
def make_sapbert_linker(
    nlp: Language,
    name: str,
    model: str,
    index: str,
    k: int,
    threshold: float,
    max_entities_per_mention: int,
    filter_for_definitions: bool,
    no_definition_threshold: float,
    spans_key: Optional[str],
    resolve_abbreviations: bool,
    follow_long_forms: bool,
    labels: List[str],
    label_types: Optional[Dict[str, List[str]]],
    batch_size: int,
    encoder_batch_size: int,
    cache_size: int,
    exact_match: bool,
    precision: str,
    threads: int,
    pooling: str,
    max_length: int,
    device: str,
    sparse_weight: Optional[float],
    cui_attr: str,
    score_attr: str,
    candidates_attr: str,
) -> "SapBERTLinker":
    """Create the linker; it loads nothing until `initialize`, `from_disk` or first use.

    model: "default" (the bundled model), "fast" (the bundled 3-layer student, int8), a local
        model directory (or an `export-onnx` one) or a Hugging Face name.
    index: "default" (the MeSH index, 8-bit HNSW), "default-exact" (the same, flat fp32) or an
        index directory from `build-index`.
    k: concepts retrieved per mention.
    threshold: a mention whose best score is below this gets `cui` None (NIL), as does one
        without content (`has_content`). 0.7, scispaCy's default, was near the best end-to-end
        link F1 on BC5CDR dev (README).
    max_entities_per_mention: length of `kb_ents`.
    filter_for_definitions, no_definition_threshold: scispaCy's: keep only concepts with a
        definition, unless they score at least no_definition_threshold. Off by default here,
        unlike scispaCy, because the open ontologies bundled carry no definitions.
    spans_key: link the span group `doc.spans[spans_key]` (as medspaCy keeps its entities)
        instead of `doc.ents`.
    resolve_abbreviations: link the long form of abbreviations found by scispaCy's
        AbbreviationDetector (`doc._.abbreviations`).
    follow_long_forms: put entities right by the abbreviations' definitions: an entity that ends
        a long form but starts inside it ("diabetes mellitus" of "non-insulin-dependent
        diabetes mellitus (NIDDM)") is widened to it, and a short form takes the label of the
        entity over its long form ("NIDDM" tagged Chemical becomes Disease).
    labels: entity labels to link; empty links every entity.
    label_types: entity label → allowed concept type prefixes (e.g. {"Disease": ["C", "F03"]});
        None takes the index's own mapping, {} restricts nothing.
    batch_size: documents per batch in `pipe` (their distinct mentions are encoded together).
    encoder_batch_size: mentions per forward pass. Mentions are sorted by length, so small
        batches pad little: on 2 CPU cores 32 linked NCBI dev twice as fast as 256, with a peak
        RSS 120 MB lower.
    cache_size: mention texts whose candidates are remembered (least recently used go
        first), so a mention seen before is neither encoded nor searched again; 0 turns it off.
    exact_match: a mention that equals a name of the index (ignoring case and spacing) gets
        that name's concepts with score 1.0 and is not encoded; `kb_ents` then holds only them.
    precision: how mentions are encoded. "int8": ONNX Runtime with int8 weights (CPU; about
        2.5× faster than fp32, without torch; the model is exported on first use and cached).
        "fp32": the model itself with torch (exact; CPU or GPU). Names are always embedded in
        fp32 when an index is built.
    threads: ONNX Runtime threads for int8 encoding; 0 takes one per physical core.
    pooling, max_length, device: encoder settings ("auto" pooling reads the model's own).
    sparse_weight: BioSyn's hybrid score: a concept scores cosine + sparse_weight × the char
        3-gram tf-idf cosine of mention and name, over the dense search's best names. None takes
        the weight the model was trained with (its sapbert_sparse.json), else 0; 0 is dense only.
    cui_attr, score_attr, candidates_attr: names of the Span extensions set.
    """
    _check_labels_against_ner(nlp, labels)
    return SapBERTLinker(
        nlp.vocab, name=name, model=model, index=index, k=k, threshold=threshold,
        max_entities_per_mention=max_entities_per_mention, filter_for_definitions=filter_for_definitions,
        no_definition_threshold=no_definition_threshold, spans_key=spans_key,
        resolve_abbreviations=resolve_abbreviations, follow_long_forms=follow_long_forms, labels=labels, label_types=label_types,
        batch_size=batch_size, encoder_batch_size=encoder_batch_size, cache_size=cache_size,
        exact_match=exact_match, precision=precision, threads=threads, pooling=pooling,
        max_length=max_length, device=device, sparse_weight=sparse_weight,
        cui_attr=cui_attr, score_attr=score_attr, candidates_attr=candidates_attr,
    )


def _check_labels_against_ner(nlp: Language, labels: Iterable[str]) -> None:
    """A label in `labels` that the pipeline's trained NER never predicts is a typo: refuse it
    (labels compare in any case). Nothing is checked before an NER with labels is added."""
    known = {label for _, pipe in nlp.pipeline if type(pipe).__name__ == "EntityRecognizer"
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


def _register_extensions(cui_attr: str, score_attr: str, candidates_attr: str) -> Optional[str]:
    """Register the Span extensions; return the stored attribute behind `candidates_attr`, or
    None where another package (scispaCy's linker) registered `candidates_attr` first, in
    which case the candidates are set on it directly. Stored behind a getter, candidates come
    back as (concept_id, score) tuples from nlp.pipe(n_process=2) too, whose workers return
    them as lists."""
    for attr in (cui_attr, score_attr):
        if not Span.has_extension(attr):
            Span.set_extension(attr, default=None)
    store = _stored(candidates_attr)
    if not Span.has_extension(store):
        Span.set_extension(store, default=None)
    if not Span.has_extension(candidates_attr):
        Span.set_extension(candidates_attr, getter=_candidates_getter(candidates_attr))
    getter = Span.get_extension(candidates_attr)[2]
    return store if getattr(getter, "sapbert_store", None) == store else None


def long_forms(doc: Doc) -> Dict[str, Span]:
    """Short form text → its long form's span, from scispaCy's AbbreviationDetector in either
    form (spans, or dicts with make_serializable=True); the first definition of a short form wins."""
    if not Doc.has_extension("abbreviations"):
        return {}
    found: Dict[str, Span] = {}
    for short in doc._.abbreviations or []:
        if isinstance(short, dict):  # AbbreviationDetector(make_serializable=True)
            if short.get("short_text") and short.get("long_text") and "long_start" in short:
                found.setdefault(short["short_text"], doc[short["long_start"]:short["long_end"]])
            continue
        long_form = getattr(short._, "long_form", None) if Span.has_extension("long_form") else None
        if isinstance(long_form, Span):
            found.setdefault(short.text, long_form)
    return found


def follow_long_forms(ents: Iterable[Span], forms: Dict[str, Span]) -> List[Span]:
    """Entities put right by the abbreviations' definitions (short form → long form span). An
    entity that ends where a long form ends but starts inside it ("diabetes mellitus" in
    "non-insulin-dependent diabetes mellitus (NIDDM)") is widened to the whole long form, when
    no other entity overlaps it: the author defined the term, so its span is known. Then a short
    form takes the label of the one entity over its long form ("NIDDM" tagged Chemical after a
    Disease long form becomes a Disease). kb_ids are kept."""
    ents = list(ents)
    label_of: Dict[str, int] = {}
    for short, form in forms.items():
        inside = [i for i, ent in enumerate(ents) if ent.start < form.end and form.start < ent.end]
        if len(inside) != 1:
            continue
        ent = ents[inside[0]]
        if ent.end == form.end and form.start < ent.start:
            ents[inside[0]] = ent = Span(ent.doc, form.start, form.end, label=ent.label, kb_id=ent.kb_id)
        label_of[short] = ent.label
    return [Span(ent.doc, ent.start, ent.end, label=label_of[ent.text], kb_id=ent.kb_id)
            if label_of.get(ent.text, ent.label) != ent.label else ent for ent in ents]


def has_content(text: str) -> bool:
    """Whether a mention can name a concept: it has a letter or digit (not only spaces,
    punctuation or control characters) and a word that is not a stop word as written ("a", "the",
    "The", "of these"; "NO" and "IF", nitric oxide and intrinsic factor, are kept)."""
    if not any(ch.isalnum() for ch in text):
        return False
    return not all(w in STOP_WORDS or (len(w) > 2 and w.istitle() and w.lower() in STOP_WORDS) for w in text.split())


def expand_abbreviations(text: str, abbreviations: Dict[str, str]) -> str:
    """Replace each short form that stands as a whole word in `text` by its long form."""
    if not abbreviations:
        return text
    if text in abbreviations:
        return abbreviations[text]
    pattern = r"(?<!\w)(" + "|".join(re.escape(s) for s in sorted(abbreviations, key=len, reverse=True)) + r")(?!\w)"
    return re.sub(pattern, lambda m: abbreviations[m.group(0)], text)


class SapBERTLinker(Pipe):
    """Link entities to concepts: embed each mention, search the concept index, set
    `span._.cui`, `span._.cui_score`, `span._.kb_ents` and `span.kb_id_`."""

    def __init__(
        self,
        vocab,
        name: str = "sapbert_linker",
        *,
        model: str = DEFAULT,
        index: str = DEFAULT,
        k: int = 10,
        threshold: float = 0.7,
        max_entities_per_mention: int = 5,
        filter_for_definitions: bool = False,
        no_definition_threshold: float = 0.95,
        spans_key: Optional[str] = None,
        resolve_abbreviations: bool = True,
        follow_long_forms: bool = True,
        labels: Iterable[str] = (),
        label_types: Optional[Dict[str, List[str]]] = None,
        batch_size: int = 256,
        encoder_batch_size: int = 32,
        cache_size: int = 10000,
        exact_match: bool = False,
        precision: str = "int8",
        threads: int = 0,
        pooling: str = "auto",
        max_length: int = 25,
        device: str = "cpu",
        sparse_weight: Optional[float] = None,
        cui_attr: str = "cui",
        score_attr: str = "cui_score",
        candidates_attr: str = "kb_ents",
    ):
        from .encoding import POOLINGS, PRECISIONS

        if cache_size < 0:
            raise ValueError(f"cache_size ({cache_size}) must be 0 (off) or more; set it in the sapbert_linker config.")
        if k < 1 or max_entities_per_mention < 1:
            raise ValueError(
                f"k ({k}) and max_entities_per_mention ({max_entities_per_mention}) must be at "
                "least 1; set them in the sapbert_linker config."
            )
        for key, value in (("threshold", threshold), ("no_definition_threshold", no_definition_threshold)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} ({value}) must lie in [0, 1] (0 keeps every concept); set it in the "
                                 "sapbert_linker config.")
        # Checked here, at add_pipe, not after a model export or at the first doc.
        for key, value, least in (("batch_size", batch_size, 1), ("encoder_batch_size", encoder_batch_size, 1),
                                  ("max_length", max_length, 1), ("threads", threads, 0)):
            if value < least:
                raise ValueError(f"{key} ({value}) must be at least {least}; set it in the sapbert_linker config.")
        if max_entities_per_mention > k:
            raise ValueError(f"max_entities_per_mention ({max_entities_per_mention}) cannot exceed k ({k}), the "
                             "concepts retrieved per mention; raise k or lower it in the sapbert_linker config.")
        if pooling not in POOLINGS + ("auto",):
            raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)} or auto; set it in the "
                             "sapbert_linker config.")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}; set it in the "
                             "sapbert_linker config.")
        self.vocab = vocab
        self.name = name
        self.model_name = model
        self.index_name = index
        self.k = k
        self.threshold = threshold
        self.max_entities_per_mention = max_entities_per_mention
        self.filter_for_definitions = filter_for_definitions
        self.no_definition_threshold = no_definition_threshold
        self.spans_key = spans_key
        self.resolve_abbreviations = resolve_abbreviations
        self.follow_long_forms = follow_long_forms
        self.link_labels = list(labels)
        self.label_types = label_types  # labels match case-insensitively (DISEASE is Disease)
        self.batch_size = batch_size
        self.encoder_batch_size = encoder_batch_size
        self.cache_size = cache_size
        # (mention text, type prefixes) → candidates, least recently used first.
        self._cache: "OrderedDict[Tuple[str, Tuple[str, ...]], Candidates]" = OrderedDict()
        self.exact_match = exact_match
        self._names: Optional[Dict[str, List[str]]] = None  # name_key(name) → concept ids
        self.precision = precision
        self.threads = threads
        self.pooling = pooling
        self.max_length = max_length
        self.device = device
        self.sparse_weight = sparse_weight
        self.hybrid = None  # sparse.HybridRescorer when the hybrid score is on
        self._compact: Optional[Path] = None  # the compact index a searched graph was built over
        self.cui_attr = cui_attr
        self.score_attr = score_attr
        self.candidates_attr = candidates_attr
        self.encoder = None
        self.index: Optional[ConceptIndex] = None
        self._candidates_store = _register_extensions(cui_attr, score_attr, candidates_attr)

    # -- loading --------------------------------------------------------------------------

    @property
    def kb(self):
        """The knowledge base of the index (`cui_to_entity`, `alias_to_cuis`)."""
        self._ensure_loaded()
        return self.index.kb

    def _load(self, model: Union[str, Path], index: Union[str, Path], graph_over: Optional[Path] = None) -> None:
        from .encoding import recorded_sparse_weight  # torch only for an fp32 model
        from .resources import load_encoder

        model_path = resolve_model(str(model))
        self.encoder = load_encoder(
            model_path, precision=self.precision, pooling=self.pooling,
            max_length=self.max_length, device=self.device, batch_size=self.encoder_batch_size,
            threads=self.threads,
        )
        index_path = resolve_index(str(index), self.encoder)
        if graph_over is not None:  # a saved pipeline's compact index: search the cached graph over it
            from .resources import graph_over_codes

            index_path = graph_over_codes(graph_over, self.encoder)
        from .resources import compact_source

        # What to_disk writes: the compact codes the graph was built over (54 MB), not the graph.
        self._compact = graph_over or compact_source(index_path)
        self.index = ConceptIndex.load(index_path, encoder=self.encoder)
        weight = self.sparse_weight
        if weight is None:
            weight = recorded_sparse_weight(getattr(self.encoder, "path", model_path))
        self.hybrid = None
        if weight:
            from .cache import cache_dir
            from .sparse import HybridRescorer

            self.hybrid = HybridRescorer.for_index(self.index, weight, cache=cache_dir())
        self._cache.clear()  # candidates from another model or index would be wrong
        # built at load, not on the first doc
        self._names = self.index.kb.name_lookup() if self.exact_match else None
        self._check_label_types()

    def _ensure_loaded(self) -> None:
        if self.index is None:
            self._load(self.model_name, self.index_name)

    def _effective_label_types(self) -> Dict[str, List[str]]:
        if self.label_types is None:
            return self.index.meta.get("label_types", {}) if self.index else {}
        return self.label_types

    def _types_by_label(self) -> Dict[str, Tuple[str, ...]]:
        """Lower-cased entity label → allowed type prefixes: scispaCy's en_ner_bc5cdr_md says
        DISEASE and CHEMICAL where the bundled index says Disease and Chemical."""
        return {label.lower(): tuple(prefixes) for label, prefixes in self._effective_label_types().items()}

    def _check_label_types(self) -> None:
        if self.label_types is not None:
            check_label_types(self.label_types, "sapbert_linker's label_types")
        for label, prefixes in self._effective_label_types().items():
            if prefixes and self.index._selector(prefixes)[1] == 0:
                raise ConceptIndexError(
                    f"label_types maps {label!r} to types {prefixes}, but no concept in the index "
                    f"{self.index.meta.get('kb_name')!r} has such a type; fix label_types or set "
                    "it to {} to search every concept."
                )

    def initialize(self, get_examples: Optional[Callable] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the model and the index (building the default index on first use)."""
        self._load(self.model_name, self.index_name)

    # -- linking --------------------------------------------------------------------------

    def _mentions(self, doc: Doc) -> Tuple[List[Span], List[Optional[Tuple[str, Tuple[str, ...]]]]]:
        """The entities to annotate (put right by the long forms where asked) and, for each, the
        (text, type prefixes) it is linked by, or None when its label is not linked."""
        forms = long_forms(doc) if self.resolve_abbreviations else {}
        spans = doc.spans.get(self.spans_key, []) if self.spans_key else doc.ents
        ents = follow_long_forms(spans, forms) if self.follow_long_forms else list(spans)
        abbreviations = {short: form.text for short, form in forms.items()}
        types_by_label = self._types_by_label()
        link_labels = {label.lower() for label in self.link_labels}
        return ents, [(expand_abbreviations(ent.text, abbreviations), types_by_label.get(ent.label_.lower(), ()))
                      if not link_labels or ent.label_.lower() in link_labels else None for ent in ents]

    def predict(self, docs: List[Doc]) -> List[List[Optional[Candidates]]]:
        """Candidates for every entity of every doc (None for entities whose label is not
        linked), from one encoder call over the batch's distinct mention texts."""
        self._ensure_loaded()
        wanted = [self._mentions(doc)[1] for doc in docs]
        distinct = sorted({key for keys in wanted for key in keys if key is not None})
        found: Dict[Tuple[str, Tuple[str, ...]], Candidates] = {}
        for key in distinct:
            if not has_content(key[0]):
                found[key] = []  # nothing to link: cui None, no candidates
            elif key in self._cache:
                self._cache.move_to_end(key)
                found[key] = self._cache[key]
        missing = [key for key in distinct if key not in found]
        if self.exact_match:
            for key in missing:
                exact = self._exact_candidates(*key)
                if exact:
                    found[key] = exact
            missing = [key for key in missing if key not in found]
        if missing:
            texts = sorted({text for text, _ in missing})
            vectors = self.encoder.encode(texts)
            row_of = {text: i for i, text in enumerate(texts)}
            by_types: Dict[Tuple[str, ...], List[str]] = {}
            for text, types in missing:
                by_types.setdefault(types, []).append(text)
            for types, group in by_types.items():
                rows = [row_of[t] for t in group]
                if self.hybrid is None:
                    results = self.index.search(vectors[rows], k=self.k, type_prefixes=types or None)
                else:
                    from .sparse import HYBRID_ROWS

                    results = self.index.search(vectors[rows], k=self.k, type_prefixes=types or None,
                                                rescore=self.hybrid.for_texts(group), min_rows=HYBRID_ROWS)
                for text, candidates in zip(group, results):
                    found[(text, types)] = candidates
            self._remember({key: found[key] for key in missing})
        return [[found[key] if key is not None else None for key in keys] for keys in wanted]

    def _exact_candidates(self, text: str, types: Tuple[str, ...]) -> Candidates:
        """The concepts (of `types`) that have `text` as a name, each with score 1.0."""
        if self._names is None:  # exact_match was turned on after loading
            self._names = self.index.kb.name_lookup()
        ids = self._names.get(name_key(text), [])
        if types:
            entities = self.index.kb.cui_to_entity
            ids = [c for c in ids if any(t.startswith(types) for t in entities[c].types)]
        return [(c, 1.0) for c in ids[: self.k]]

    def _remember(self, new: Dict[Tuple[str, Tuple[str, ...]], Candidates]) -> None:
        if not self.cache_size:
            return
        self._cache.update(new)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def set_annotations(self, docs: List[Doc], candidates: List[List[Optional[Candidates]]]) -> None:
        """Set `kb_id_`, then the Span extensions (in that order: a span's extension values
        are keyed by its kb_id, so setting them first would lose them)."""
        for doc, doc_candidates in zip(docs, candidates):
            kept: List[Optional[Candidates]] = []
            new_ents = []
            for ent, cands in zip(self._mentions(doc)[0], doc_candidates):
                if cands is None:
                    kept.append(None)
                    new_ents.append(ent)
                    continue
                cands = self._keep(cands)
                kept.append(cands)
                kb_id = cands[0][0] if cands else ""
                new_ents.append(Span(doc, ent.start, ent.end, label=ent.label, kb_id=kb_id))
            if self.spans_key:
                doc.spans[self.spans_key] = new_ents
                new_ents = doc.spans[self.spans_key]
            else:
                doc.ents = new_ents
                new_ents = doc.ents
            for ent, cands in zip(new_ents, kept):
                if cands is None:
                    continue
                ent._.set(self._candidates_store or self.candidates_attr, cands)
                ent._.set(self.cui_attr, cands[0][0] if cands else None)
                ent._.set(self.score_attr, cands[0][1] if cands else None)

    def _keep(self, candidates: Candidates) -> Candidates:
        """The candidates a span gets: those scoring at least the threshold (and, with
        filter_for_definitions, having a definition or scoring no_definition_threshold), the
        best max_entities_per_mention of them."""
        kept = [(c, s) for c, s in candidates if s >= self.threshold]
        if self.filter_for_definitions:
            entities = self.index.kb.cui_to_entity
            kept = [(c, s) for c, s in kept if entities[c].definition or s >= self.no_definition_threshold]
        return kept[: self.max_entities_per_mention]

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc], self.predict([doc]))
        return doc

    def score(self, examples: Iterable, **kwargs) -> Dict[str, object]:
        """Link precision, recall and F1 (`nel_micro_p/r/f`, `nel_f_per_type`) as spaCy's own
        entity_linker reports them, so `spacy evaluate` and `nlp.evaluate` show linking: over the
        entities whose spans the reference shares, a predicted `kb_id_` against the reference's
        (NIL, no concept, is "" or "NIL")."""
        from spacy.scorer import Scorer

        return Scorer.score_links(examples, negative_labels=["", "NIL"], **kwargs)

    def pipe(self, stream: Iterable[Doc], *, batch_size: Optional[int] = None) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size or self.batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    # -- serialisation --------------------------------------------------------------------

    def _cfg(self) -> dict:
        return {
            "pooling": self.encoder.pooling if self.encoder else self.pooling,
            "max_length": self.max_length,
            "precision": getattr(self.encoder, "precision", "fp32") if self.encoder else self.precision,
        }

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Write the model and the index into `path`, so the pipeline needs neither original."""
        self._ensure_loaded()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.encoder.save(path / MODEL_DIR)
        cfg = self._cfg()
        if self._compact is not None:
            if (path / INDEX_DIR).resolve() != Path(self._compact).resolve():
                shutil.copytree(self._compact, path / INDEX_DIR, dirs_exist_ok=True)
            cfg["index_graph_over_codes"] = True
        else:
            self.index.save(path / INDEX_DIR)
        srsly.write_json(path / CFG_FILE, cfg)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "SapBERTLinker":
        """Load the model and index written by `to_disk`."""
        path = Path(path)
        if not (path / MODEL_DIR).exists() or not (path / INDEX_DIR).exists():
            raise ConceptIndexError(
                f"{path} lacks the {MODEL_DIR}/ and {INDEX_DIR}/ folders that sapbert_linker "
                "writes; save the pipeline again with nlp.to_disk."
            )
        cfg = srsly.read_json(path / CFG_FILE) if (path / CFG_FILE).exists() else {}
        self.pooling = cfg.get("pooling", self.pooling)
        self.precision = cfg.get("precision", self.precision)
        self._load(path / MODEL_DIR, path / INDEX_DIR,
                   graph_over=path / INDEX_DIR if cfg.get("index_graph_over_codes") else None)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        raise NotImplementedError(
            "sapbert_linker is saved as a directory (model and index); use nlp.to_disk."
        )
