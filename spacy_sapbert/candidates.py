"""Candidate generation without spaCy: mention texts (with the concept types each may take) in,
ranked concepts out. The `sapbert_linker` pipe, the harness's model system and the dev figures
all link through one `CandidateGenerator`, so the figures are the pipe's.

A mention is linked in this order: no content (no letter or digit, or only stop words) gives
nothing; a mention seen before comes from the cache; with `exact_match`, a mention equal to a
name gets that name's concepts; the rest are encoded together and searched, dense or hybrid,
the concepts bearing the mention's own name first (`exact_first`). A name of the generator's
names table (`read_added_names`) counts as a name of the index, its concepts before the
index's.
"""
import dataclasses
import warnings
from collections import OrderedDict
from itertools import islice
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from spacy.lang.en.stop_words import STOP_WORDS

from .encoders.base import mention_of
from .kb.concepts import KBFormatError, exact_key, name_hash
from .ranking.concepts import Candidates, search_concepts

# A mention to link: its text, and the type prefixes its concepts must have (() for any). For
# a contextual model the text is the mention in its window (encoders.base.in_window): the window is
# encoded, the mention between the markers matched and scored by characters.
Mention = Tuple[str, Tuple[str, ...]]


@dataclass
class CandidateSettings:
    """How candidates are found and kept (the linking knobs of the pipe's config).

    k: concepts retrieved per mention.
    threshold: a mention whose best score is below this gets no concept (NIL). 0.7, scispaCy's
        default, was near the best end-to-end link F1 on BC5CDR dev (README).
    max_entities_per_mention: concepts kept per mention (at most k).
    filter_for_definitions, no_definition_threshold: scispaCy's: keep only concepts with a
        definition, unless they score at least no_definition_threshold. Off by default here,
        unlike scispaCy, because the open ontologies bundled carry no definitions.
    cache_size: mentions whose candidates are remembered (least recently used go first); 0: off.
    """

    k: int = 10
    threshold: float = 0.7
    max_entities_per_mention: int = 5
    filter_for_definitions: bool = False
    no_definition_threshold: float = 0.95
    cache_size: int = 10000

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass
class Scoring:
    """How a model's search hits are scored and ranked. A trained model records its own values
    (its sapbert.json); None here takes them, a value overrides them.

    sparse_weight: BioSyn's hybrid score: a concept scores (cosine + w × the char 3-gram tf-idf
        cosine of mention and name) / (1 + w) over the dense search's best names; 0 is dense only.
    marginal_tau: rank a mention's concepts by BioSyn's synonym-marginal score, the soft maximum
        tau × log Σ exp(score / tau) over each concept's names among the rows searched, so that a
        concept many close names point to outranks one lone name; each concept shows that score
        (at most 1), which `threshold` reads, so kb_ents reads in the order of its scores; 0
        ranks and scores concepts by their best name.
    exact_first: the concepts holding a name that equals the mention (ignoring case, spacing
        and punctuation: kb.exact_key) rank before the others, in the model's order, at score
        1.0 (as an identical string), whether or not the search reached that name's row; the
        others stay as alternatives (ranking.concepts.best_concepts).
    exact_match: a mention that equals a name of the index (as exact_first compares them) gets
        that name's concepts with score 1.0 and is not encoded.
    """

    sparse_weight: Optional[float] = None
    marginal_tau: Optional[float] = None
    exact_first: bool = True
    exact_match: bool = False

    def __post_init__(self) -> None:
        check_settings(self)


def check_settings(settings) -> None:
    """One sentence naming the key for a value of the wrong kind or out of range, in any of the
    settings dataclasses (the pipe's as well)."""
    for field in dataclasses.fields(settings):
        value, default = getattr(settings, field.name), field.default
        kind = type(default) if default is not None else None
        if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                     or (kind is int and not isinstance(value, int))):
            raise ValueError(f"{field.name} ({value!r}) must be a number; set it in the sapbert_linker config.")
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"{field.name} ({value!r}) must be true or false; set it in the sapbert_linker config.")
    for key in ("threshold", "no_definition_threshold"):
        value = getattr(settings, key, 0.0)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{key} ({value}) must lie in [0, 1] (0 keeps every concept); set it in the "
                             "sapbert_linker config.")
    for key in ("sparse_weight", "marginal_tau"):
        value = getattr(settings, key, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{key} ({value!r}) must be a number of at least 0, or null for the model's own; "
                             "set it in the sapbert_linker config.")
    for key, least in (("k", 1), ("max_entities_per_mention", 1), ("cache_size", 0), ("batch_size", 1)):
        value = getattr(settings, key, least)
        if value < least:
            raise ValueError(f"{key} ({value}) must be at least {least}; set it in the sapbert_linker config.")
    if getattr(settings, "max_entities_per_mention", 0) > getattr(settings, "k", 1 << 30):
        raise ValueError(f"max_entities_per_mention ({settings.max_entities_per_mention}) cannot exceed k "
                         f"({settings.k}), the concepts retrieved per mention; raise k or lower it in the "
                         "sapbert_linker config.")


def read_scoring(model_path) -> Scoring:
    """The scoring a model directory records (0 where it records none)."""
    from .encoders.base import recorded_marginal_tau, recorded_sparse_weight

    return Scoring(sparse_weight=recorded_sparse_weight(model_path), marginal_tau=recorded_marginal_tau(model_path))


def has_content(text: str) -> bool:
    """Whether a mention can name a concept: it has a letter or digit (not only spaces,
    punctuation or control characters) and a word that is not a stop word as written ("a", "the",
    "The", "of these"; "NO" and "IF", nitric oxide and intrinsic factor, are kept)."""
    if not any(ch.isalnum() for ch in text):
        return False
    return not all(w in STOP_WORDS or (len(w) > 2 and w.istitle() and w.lower() in STOP_WORDS) for w in text.split())


class CandidateGenerator:
    """Ranked concepts for mentions, from an encoder and a concept index.

    encoder: embeds mentions (any `encoders.base.Encoder`); the index answers to its fingerprint.
    index: a `search.index.ConceptIndex`.
    settings: a `CandidateSettings`; scoring: a `Scoring` (the pipe shares its own objects and
        clears the cache when a value changes, so a change takes effect at once).
    content_rule: mentions without content get nothing (has_content); the harness turns it off,
        because its protocol lower-cases mentions ("WAS", Wiskott-Aldrich syndrome, would read
        as the stop word "was") and scores every mention.
    recorded: the scoring the model records (read_scoring), used where `scoring` says None.
    hybrid: the hybrid score's `ranking.hybrid.HybridRescorer` over the index's names; made from
        the index (and cached) on first need when not given.
    names: added names (`read_added_names`): exact_key → positions of its concepts in the index.
        A mention equal to one gets those concepts first at score 1.0, before the index's own
        concepts of that name and whatever the search found.
    older_ids: ids the index no longer holds → the index's ids for them (a names table's third
        column), which `resolve_id` answers.
    answers: a concept outside the scheme answers are given in → its nearest broader concepts
        inside it (`kb.schemes.scheme_answers`), which take its place at its score: a MONDO
        concept with no MeSH or OMIM id answers as the MeSH heading above it ("cancer"
        MONDO:0004992 as neoplasms D009369), as MeSH-annotated text expects; the concept itself
        follows its first heading.
    """

    def __init__(self, encoder, index, settings: Optional[CandidateSettings] = None,
                 scoring: Optional[Scoring] = None, content_rule: bool = True,
                 recorded: Optional[Scoring] = None, hybrid=None, names: Optional[Dict[str, List[int]]] = None,
                 older_ids: Optional[Dict[str, str]] = None, answers: Optional[Dict[str, List[str]]] = None):
        self.content_rule = content_rule
        self.answers = answers or {}
        self.names = names or {}
        self.older_ids = older_ids or {}
        self.encoder = encoder
        self.index = index
        self.settings = settings or CandidateSettings()
        self.scoring = scoring or Scoring()
        self.recorded = recorded or Scoring(sparse_weight=0.0, marginal_tau=0.0)
        self._rescorer = hybrid
        self._cache: "OrderedDict[Mention, Candidates]" = OrderedDict()
        self._definitions_checked = False  # _warn_without_definitions has looked once

    @classmethod
    def load(cls, encoder_loader, index_loader, settings: CandidateSettings, scoring: Optional[Scoring] = None,
             graph_over=None) -> "CandidateGenerator":
        """Load the encoder and index the loaders name (`pipe.loaders`), with the scoring the
        model records."""
        encoder = encoder_loader.load(calibration=index_loader.calibration())
        index = index_loader.load(encoder, graph_over=graph_over)
        names, older = read_names_tables(index_loader.tables(), index, str(index_loader.index),
                                         shipped=index_loader.shipped_tables())
        patterns = index_loader.answer_patterns(index.meta)
        answers = None
        if patterns:
            from .kb.schemes import index_answers

            answers = index_answers(getattr(index, "main", index), patterns)
        model_path = getattr(encoder, "path", None) or encoder_loader.model_path()
        return cls(encoder, index, settings, scoring, recorded=read_scoring(model_path), names=names, older_ids=older,
                   answers=answers)

    @property
    def tau(self) -> float:
        """The synonym-marginal tau concepts are ranked by (0: by their best name)."""
        tau = self.scoring.marginal_tau
        return float(self.recorded.marginal_tau if tau is None else tau)

    @property
    def sparse_weight(self) -> float:
        """The hybrid score's sparse weight (0: dense only)."""
        weight = self.scoring.sparse_weight
        return float(self.recorded.sparse_weight if weight is None else weight)

    @property
    def hybrid(self):
        """The hybrid score's rescorer at the current sparse weight, or None when dense only."""
        weight = self.sparse_weight
        if not weight:
            return None
        if self._rescorer is None:
            from .cache import cache_dir
            from .ranking.hybrid import HybridRescorer

            fitted, more_names = self.index.hybrid_names() if hasattr(self.index, "hybrid_names") else (self.index, None)
            self._rescorer = HybridRescorer.for_index(fitted, weight, cache=cache_dir())
            self._rescorer.more_names = more_names
        self._rescorer.weight = weight
        return self._rescorer

    def generate(self, mentions: Sequence[Mention]) -> List[Candidates]:
        """For each mention, its candidates [(concept_id, score), …], best first: those scoring
        at least the threshold (see CandidateSettings), at most max_entities_per_mention."""
        return [self.select(candidates) for candidates in self.ranked(mentions)]

    def ranked(self, mentions: Sequence[Mention]) -> List[Candidates]:
        """For each mention, its k best candidates before the threshold and the other filters
        of `select`."""
        found = self._found(sorted(set(mentions)))
        return [found[mention] for mention in mentions]

    def select(self, candidates: Candidates) -> Candidates:
        """The candidates a mention keeps of its k best (threshold, definitions, count)."""
        settings = self.settings
        kept = [(c, s) for c, s in candidates if s >= settings.threshold]
        if settings.filter_for_definitions:
            entities = self.index.kb.cui_to_entity
            self._warn_without_definitions()
            kept = [(c, s) for c, s in kept if entities[c].definition or s >= settings.no_definition_threshold]
        return kept[: settings.max_entities_per_mention]

    def _warn_without_definitions(self) -> None:
        """Once: a warning where filter_for_definitions (scispaCy's default, not this linker's)
        is on and the index's KB defines no concept, so the filter drops all but near-exact links."""
        if self._definitions_checked:
            return
        self._definitions_checked = True
        own = getattr(self.index, "main", self.index).kb.cui_to_entity  # a supplement defines nothing
        if not any(concept.definition for concept in own.values()):
            warnings.warn(
                "filter_for_definitions is on, but this index's KB defines no concept, so every candidate "
                f"scoring under no_definition_threshold ({self.settings.no_definition_threshold}) is dropped; "
                "set filter_for_definitions to false (this linker's default) or give a KB with definitions.",
                stacklevel=2)

    def _found(self, distinct: List[Mention]) -> Dict[Mention, Candidates]:
        """The k best concepts of each distinct mention, through the content rule, the cache,
        exact names and the search."""
        found: Dict[Mention, Candidates] = {}
        for mention in distinct:
            if self.content_rule and not has_content(mention_of(mention[0])):
                found[mention] = []
            elif mention in self._cache:
                self._cache.move_to_end(mention)
                found[mention] = self._cache[mention]
            elif self.scoring.exact_match:
                exact = self._exact(mention_of(mention[0]), mention[1])
                if exact:
                    found[mention] = self._in_scheme(mention, exact) if self.answers else exact
        missing = [mention for mention in distinct if mention not in found]
        if missing:
            searched = self._search(missing)
            if self.names:
                searched = {mention: self._added_first(mention, ranked) for mention, ranked in searched.items()}
            if self.answers:
                searched = {mention: self._in_scheme(mention, ranked) for mention, ranked in searched.items()}
            found.update(searched)
            self._remember(searched)
        return found

    def _search(self, mentions: List[Mention]) -> Dict[Mention, Candidates]:
        """Encode the mentions' distinct texts once, then search each group of type prefixes."""
        texts = sorted({text for text, _ in mentions})
        vectors = self.encoder.encode(texts)
        row_of = {text: i for i, text in enumerate(texts)}
        by_types: Dict[Tuple[str, ...], List[str]] = {}
        for text, types in mentions:
            by_types.setdefault(types, []).append(text)
        found: Dict[Mention, Candidates] = {}
        for types, group in by_types.items():
            query = vectors[[row_of[t] for t in group]]
            keys = [name_hash(mention_of(t)) for t in group] if self.scoring.exact_first else None
            rescore, min_rows, hybrid = None, 32, self.hybrid
            if hybrid is not None:
                rescore, min_rows = hybrid.for_texts([mention_of(t) for t in group]), hybrid.rows
            results = search_concepts(self.index, query, self.settings.k, types or None, rescore=rescore,
                                      min_rows=min_rows, tau=self.tau, exact_keys=keys)
            found.update(((text, types), candidates) for text, candidates in zip(group, results))
        return found

    def _in_scheme(self, mention: Mention, candidates: Candidates) -> Candidates:
        """`candidates` with each concept outside the answers' scheme answered by its broader
        concepts inside it (of the mention's types), at its score: the first of them, the
        concept itself, then the others; each concept once, first place kept. The broader
        concepts come in the order of the mention's own scores for them among `candidates`
        ("isolated aniridia" answers as Aniridia before Genetic Diseases, Inborn), those it has
        none for after, in the KB's order."""
        ranked: Dict[str, float] = {}
        own = dict(candidates)
        for concept_id, score in candidates:
            answers = [a for a in self.answers.get(concept_id, ())
                       if not mention[1] or self.index.has_type(self.index.position_of(a), mention[1])]
            answers.sort(key=lambda a: -own.get(a, -1.0))  # stable: the KB's order among the rest
            for answer in [*answers[:1], concept_id, *answers[1:]]:
                ranked.setdefault(answer, score)
        return list(ranked.items())[: self.settings.k]

    def _added_first(self, mention: Mention, candidates: Candidates) -> Candidates:
        """`candidates` after the concepts the names table gives the mention's text, at 1.0."""
        added = self._exact(mention_of(mention[0]), mention[1], index_names=False)
        if not added:
            return candidates
        ids = {concept_id for concept_id, _ in added}
        return (added + [(c, s) for c, s in candidates if c not in ids])[: self.settings.k]

    def resolve_id(self, concept_id: str) -> Optional[str]:
        """The index's id for `concept_id`: its own, the one its KB gives an alternative id, or
        the one the names table gives an older id; None where none holds it."""
        return self.index.resolve_id(concept_id) or self.older_ids.get(concept_id)

    def holds_name(self, text: str, types: Tuple[str, ...] = ()) -> bool:
        """Whether `text` (ignoring case, spacing and punctuation) is the name of a row of a
        concept of `types`, or an added name of one."""
        return bool(self._exact(text, types))

    def _exact(self, text: str, types: Tuple[str, ...], index_names: bool = True) -> Candidates:
        """The concepts (of `types`) that have `text` as an added name (`names`), in the table's
        order, then, with `index_names`, as the name of a row, in row order; each with score 1.0."""
        positions = dict.fromkeys(self.names.get(exact_key(text), ()))
        if index_names:
            rows = self.index.rows_named(name_hash(text))
            positions.update(dict.fromkeys(int(c) for c in self.index.row_concepts[rows]))
        found = ((self.index.concept_ids[c], 1.0) for c in positions if not types or self.index.has_type(c, types))
        return list(islice(found, self.settings.k))  # a name many rows bear is read no further than k

    def _remember(self, new: Dict[Mention, Candidates]) -> None:
        if not self.settings.cache_size:
            return
        self._cache.update(new)
        while len(self._cache) > self.settings.cache_size:
            self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget remembered candidates (after a knob that changes them, such as k)."""
        self._cache.clear()


def read_names_tables(paths, index, shown: Optional[str] = None, shipped=()
                      ) -> Tuple[Dict[str, List[int]], Dict[str, str]]:
    """Several names tables (`read_added_names`) as one: a name's concepts in the order of the
    tables, then of each table's lines; an older id mapped by the first table that maps it.
    shipped: the tables an index ships (read_added_names' `shipped`)."""
    names: Dict[str, List[int]] = {}
    older: Dict[str, str] = {}
    for path in paths:
        added, mapped = read_added_names(path, index, shown, shipped=path in shipped)
        for key, concepts in added.items():
            names.setdefault(key, []).extend(c for c in concepts if c not in names[key])
        for concept_id, current in mapped.items():
            older.setdefault(concept_id, current)
    return names, older


def read_added_names(path, index, shown: Optional[str] = None, shipped: bool = False
                     ) -> Tuple[Dict[str, List[int]], Dict[str, str]]:
    """A names table (kb.formats.read_names) as the generator asks it: each name's key → the
    positions of its concepts in `index`, in the table's order; and the older ids the table maps
    (an id the index lacks → the index's id given beside it). An id that is no concept of the
    index, nor another id of one, fails with one sentence naming its line, unless its current id
    follows it; a current id must be the index's, only for an id the index lacks, and one per
    older id. `shown`: the index as the user named it, for the errors. shipped: the table the
    index ships, written for it with its supplement: a line whose concept the index, loaded
    without its supplement (index.supplement = false), does not hold is skipped."""
    from .kb.formats import read_names

    def find(concept_id: str) -> Optional[int]:
        found = index.position_of(concept_id)
        return index.position_of(index.resolve_id(concept_id) or "") if found is None else found

    def fail(line_no: int, concept_id: str, held: bool = False, older: bool = False) -> KBFormatError:
        where = f"the index {shown or index.meta.get('kb_name', '')!r}"
        said = f"is in {where}, so needs no current id beside it" if held else f"is not in {where}"
        also = " (or, for an id it no longer holds, give its current id in a third column)" if older else ""
        return KBFormatError(f"{path}:{line_no}: concept {concept_id!r} {said}; fix or remove that line{also}.")

    names: Dict[str, List[int]] = {}
    older: Dict[str, str] = {}
    for line_no, name, concept_id, current in read_names(path):
        found = find(concept_id)
        if shipped and (found if current is None else find(current)) is None:
            continue
        if current is not None:
            if found is not None:
                raise fail(line_no, concept_id, held=True)
            found = find(current)
            if found is None:
                raise fail(line_no, current)
            if older.setdefault(concept_id, index.concept_ids[found]) != index.concept_ids[found]:
                raise KBFormatError(f"{path}:{line_no}: concept {concept_id!r} was given the current id "
                                    f"{older[concept_id]!r} above; give one current id per older id.")
        if found is None:
            raise fail(line_no, concept_id, older=True)
        concepts = names.setdefault(exact_key(name), [])
        if found not in concepts:
            concepts.append(found)
    return names, older
