"""The evaluation protocols of the BioSyn and SapBERT papers, turned into queries.

standard: resolve abbreviations (scispaCy's AbbreviationDetector over the document), split
composite mentions ("breast and ovarian cancer" → two parts, right only if every part is),
correct known typos, lowercase, and turn punctuation into spaces; the dictionary's names get
the same normalisation.
lenient: the raw mention; right if the top concept is any of its gold ids.
"""
import logging
import re
import string
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase, name_key
from spacy_sapbert.mentions.abbreviations import linked_text, long_forms

from . import datasets as ds
from .datasets import Document, Mention

logger = logging.getLogger(__name__)

PROTOCOLS = ("standard", "lenient")
LINKING_DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical", "cadec")
_PUNCTUATION = re.compile(r"[\s{}]+".format(re.escape(string.punctuation)))


@dataclass
class Query:
    """What a system is asked: one or more mention parts, judged against `gold`.

    parts: the texts to link (one for a plain mention, several for a split composite).
    gold: the mention's gold ids; each part is right if its prediction is any of them.
    """

    mention: Mention
    parts: List[str]
    gold: List[str]


class TextNormaliser:
    """Lowercase, correct typos (`wrong||right` lines), and replace punctuation by spaces."""

    def __init__(self, typos: Optional[Dict[str, str]] = None):
        self.typos = typos or {}

    @classmethod
    def from_typo_file(cls, path: Optional[Path]) -> "TextNormaliser":
        typos = {}
        if path is not None:
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                if "||" in line:
                    wrong, right = line.split("||", 1)
                    typos[wrong.strip()] = right.strip()
        return cls(typos)

    @classmethod
    def for_dataset(cls, dataset: str, data_dir: Path) -> "TextNormaliser":
        """The standard protocol's normaliser of `dataset`: NCBI-disease's also corrects the
        typos its spell-check file (medic/ncbi-spell-check.txt) lists."""
        if dataset == "ncbi-disease":
            return cls.from_typo_file(Path(data_dir) / "medic" / "ncbi-spell-check.txt")
        return cls()

    def __call__(self, text: str) -> str:
        tokens = [self.typos.get(t, t) for t in text.lower().split()]
        return " ".join(_PUNCTUATION.split(" ".join(tokens))).strip()


def document_abbreviations(documents: Iterable[Document], batch_size: int = 32, missed: bool = True,
                           is_name: Optional[Callable[[str], bool]] = None) -> Dict[str, Dict[str, str]]:
    """Short form → long form for each document, as the pipe reads them (abbreviations.long_forms):
    the abbreviation detector (scispaCy's, or its copy) over spaCy's English tokenizer with the
    pipe's biomedical rules (tokenization.biomedical_tokens), and, with `missed`, the
    definitions it misses and the short forms among the document's mentions (the pipe's
    entities) used without one; `is_name`: whether the dictionary holds a text as a name, as
    the pipe's asks its index."""
    import spacy

    from spacy_sapbert.pipe import abbreviation_detector  # noqa: F401  (registers the factory)
    from spacy_sapbert.pipe.tokenization import biomedical_tokens

    nlp = biomedical_tokens(spacy.blank("en"))
    nlp.add_pipe("abbreviation_detector")
    documents = list(documents)
    found: Dict[str, Dict[str, str]] = {}
    for document, doc in zip(documents, nlp.pipe((d.text for d in documents), batch_size=batch_size)):
        spans = [doc.char_span(m.start, m.end, alignment_mode="expand") for m in document.mentions]
        entities = [span for span in spans if span is not None]
        found[document.doc_id] = {short: form.text for short, form in long_forms(doc, missed, entities, is_name).items()}
    return found


_WORD = r"[a-zA-Z-]+"
_PREFIX_OF = re.compile(
    rf"(?P<head>{_WORD}) of (both )?(the )?(?P<first>({_WORD} )+)(and|or) (the )?(?P<second>({_WORD} ?)+)"
)
_LIST_THEN_STEM = re.compile(
    rf"(?P<items>({_WORD},? )+)(and|or|and/or) (?P<last>(the )?{_WORD}) (?P<stem>.*)"
)
_NESTED_LIST_THEN_STEM = re.compile(
    rf"(?P<items>({_WORD},? )+)(and|or|and/or) (?P<last>{_WORD} and {_WORD}) (?P<stem>.*)"
)
_SLASH = re.compile(r"(?P<before>(.* )*)(?P<left>.*)/(?P<right>.*)?(?P<after>( .*)*)")


def split_composite(text: str, n_ids: int) -> List[str]:
    """Split a composite mention into one part per concept, with BioSyn's rules:
    "X of A and B" → X of A, X of B; "A, B and C stem" → A stem, B stem, C stem;
    "stem A/B rest" → stem A rest, stem B rest; else one part per token when the counts match.
    Returns [text] when no rule gives exactly `n_ids` parts.
    """
    text = text.strip()
    if n_ids < 2:
        return [text]
    parts: List[str] = []
    match = _PREFIX_OF.match(text)
    if match:
        parts = [f"{match['head']} of {match['first'].strip()}", f"{match['head']} of {match['second'].strip()}"]
    else:
        match = _NESTED_LIST_THEN_STEM.match(text) or _LIST_THEN_STEM.match(text)
        if match:
            items = [i.strip() for i in match["items"].split(",") if i.strip()] + [match["last"]]
            parts = [f"{item} {match['stem']}" for item in items]
        else:
            match = _SLASH.fullmatch(text)
            if match and "and/or" not in text:
                parts = [
                    " ".join(p for p in (match["before"].strip(), side.strip(), match["after"].strip()) if p)
                    for side in (match["left"], match["right"] or "")
                ]
            elif len(text.split()) == n_ids:
                parts = text.split()
    return parts if len(parts) == n_ids else [text]


def composite_gold(ids: Sequence[str]) -> List[str]:
    """The ids a composite's parts are split by: when OMIM and MeSH ids are mixed, the OMIM
    ones are auxiliary and dropped (as BioSyn does)."""
    omim = [i for i in ids if i.startswith("OMIM:")]
    return [i for i in ids if not i.startswith("OMIM:")] if omim and len(omim) < len(ids) else list(ids)


def build_queries(
    mentions: Sequence[Mention],
    protocol: str,
    abbreviations: Optional[Dict[str, Dict[str, str]]] = None,
    normalise: Optional[TextNormaliser] = None,
    is_name: Callable[[str], bool] = lambda text: False,
) -> List[Query]:
    """Turn gold mentions into queries under `protocol` ("standard" or "lenient"). Standard
    queries expand the short forms of their document's `abbreviations`, except in a mention
    that is more than a short form and a dictionary name as written (`is_name`, given the
    normalised text: abbreviations.linked_text)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"Unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}.")
    normalise = normalise or TextNormaliser()
    queries = []
    for mention in mentions:
        if protocol == "lenient":
            queries.append(Query(mention, [mention.text], list(mention.ids)))
            continue
        text = linked_text(mention.text, (abbreviations or {}).get(mention.doc_id, {}),
                           lambda written: is_name(normalise(written)))
        gold = composite_gold(mention.ids) if mention.composite else list(mention.ids)
        parts = split_composite(text, len(gold)) if mention.composite else [text]
        queries.append(Query(mention, [normalise(p) or p for p in parts], gold))
    return queries


def dictionary_additions(mentions: Sequence[Mention], protocol: str,
                         normalise: Optional[TextNormaliser] = None) -> List[Tuple[str, str]]:
    """(concept id, name) pairs that training mentions add to the dictionary.

    lenient: each mention's raw text under each of its gold ids (a query is a whole mention,
        right on any id, and whole composite strings recur between splits).
    standard: the normalised text of mentions with a single gold id, and of each part of a
        composite mention the corpus splits itself, under that part's id (Mention.parts:
        BC5CDR's "hemorrhagic|cystitis" gives "hemorrhagic" to D006470). Other multi-id
        mentions are left out: their parts cannot be paired with ids (NCBI does not order ids
        as the text orders its parts), and a whole string under several ids only makes ties
        for the split parts that standard queries are.
    On NCBI dev with char 3-gram tf-idf these rules give the best Acc@1 of the variants tried
    (lenient 83.6 vs 82.2 single-id only; standard 85.1 vs 83.1 all ids).
    """
    normalise = normalise or TextNormaliser()
    pairs = []
    for mention in mentions:
        if protocol == "lenient":
            pairs.extend((i, mention.text) for i in mention.ids)
        elif len(mention.ids) == 1:
            pairs.append((mention.ids[0], normalise(mention.text)))
        else:
            pairs.extend((i, normalise(part)) for i, part in zip(mention.ids, mention.parts))
    return [(i, text) for i, text in pairs if text]


def add_training_names(dictionary: KnowledgeBase, additions: Sequence[Tuple[str, str]],
                       precedence: bool = True) -> KnowledgeBase:
    """The dictionary plus the names training mentions give concepts, each such name left to
    the concepts training mentions give it most often: other concepts bearing it lose it (they
    keep their other names), and a minority annotation adds nothing.

    Only ties change: a name under two concepts scores the same for both, and which one a
    system then ranks first is arbitrary (row order). The corpus's own annotations settle it
    instead: BC5CDR calls "hepatitis" drug-induced liver injury (D056486), not MEDIC's
    hepatitis (D006505). A concept whose every name is claimed elsewhere keeps its names, as a
    concept without a name cannot be searched at all.

    additions: (concept id, name) pairs of dictionary_additions, with ids as the dictionary
        stores them (resolved).
    precedence: False adds every pair to `dictionary` itself and takes no name from any concept,
        as the papers' code does, leaving ties to row order (the independent tf-idf anchor,
        83.2 on NCBI dev lenient, was measured so).
    RETURNS: a new knowledge base, or with precedence False the dictionary given.
    """
    claimed, owners = dictionary, None
    if precedence:
        votes: Dict[str, Counter] = {}
        for concept_id, name in additions:
            votes.setdefault(name_key(name), Counter())[concept_id] += 1
        owners = {}
        for key, counts in votes.items():
            top = max(counts.values())
            owners[key] = {c for c, n in counts.items() if n == top}
        concepts, n_left, n_kept_whole = [], 0, 0
        for concept in dictionary:
            names = [n for n in concept.names if concept.concept_id in owners.get(name_key(n), {concept.concept_id})]
            n_left += len(concept.names) - len(names)
            if not names:
                names, n_kept_whole = concept.names, n_kept_whole + 1
            concepts.append(replace(concept, canonical_name=names[0], aliases=names[1:]))
        claimed = KnowledgeBase(concepts, name=dictionary.name, version=dictionary.version)
        logger.info("Training mentions claim %d names from other concepts of %s (%d concepts kept theirs: "
                    "every name was claimed).", n_left, dictionary.name, n_kept_whole)
    for concept_id, name in additions:
        if owners is None or concept_id in owners[name_key(name)]:
            claimed.add(Concept(concept_id, name))
    return claimed


def _normalised_kb(kb: KnowledgeBase, normalise: TextNormaliser) -> KnowledgeBase:
    return KnowledgeBase(
        (Concept(c.concept_id, normalise(c.canonical_name), [normalise(a) for a in c.aliases],
                 c.types, alt_ids=c.alt_ids) for c in kb),
        name=kb.name, version=kb.version,
    )


@dataclass
class Task:
    """What one evaluation needs: the queries and the dictionary to link them to."""

    queries: List[Query]
    dictionary: KnowledgeBase
    n_unlinkable: int = 0
    documents: Dict[str, str] = field(default_factory=dict)  # doc id → text, for mentions in context


# The train split, by document, for choosing rules and settings before dev is read.
TRAIN_FOLD = "train-fold"
TRAIN_FOLDS = 5


def fold_split(items: Sequence, fold: int, key=None) -> Tuple[list, list]:
    """Fold `fold` (0 to TRAIN_FOLDS - 1) of `items`: every TRAIN_FOLDS-th in `key` order (a
    stable sort), from the `fold`-th on; and the others, in that order."""
    if not 0 <= fold < TRAIN_FOLDS:
        raise ValueError(f"fold {fold} is not a train fold; give 0 to {TRAIN_FOLDS - 1}.")
    ordered = sorted(items, key=key)
    return ([x for i, x in enumerate(ordered) if i % TRAIN_FOLDS == fold],
            [x for i, x in enumerate(ordered) if i % TRAIN_FOLDS != fold])


def train_fold(corpus: ds.Corpus, fold: int) -> Tuple[ds.Corpus, List[Mention]]:
    """Fold `fold` (0 to TRAIN_FOLDS - 1) of a train corpus: every TRAIN_FOLDS-th document in id
    order, from the `fold`-th on (fold_split); and the mentions of the other documents, its
    training names."""
    held, others = fold_split(corpus.documents, fold, key=lambda doc: doc.doc_id)
    return ds.Corpus(held), [m for doc in others for m in doc.mentions]


def prepare(dataset: str, split: str, protocol: str, data_dir: Path, fold: int = 0,
            training_precedence: bool = True, vocabulary: Sequence[str] = ds.DEFAULT_VOCABULARY,
            held_out_fold: int = -1) -> Task:
    """Load the split's mentions, turn them into queries, and build the dictionary (the
    base vocabulary plus training mentions — train for dev, train and dev for test — with the
    names training mentions give a concept left to it, unless `training_precedence` is False:
    add_training_names). split "train" gives the train mentions as queries against the dev
    split's dictionary: what training against frozen keys (spacy_sapbert_training.data.keys) learns from.
    split "train-fold" gives fold `fold` of the train documents (train_fold) as queries against
    the base vocabulary plus the other folds' mentions: where rules and settings are chosen,
    so that dev is read once. vocabulary: the chemical dictionary's name sources
    (datasets.base_dictionary). `held_out_fold` (0 to 4; split "train" only) leaves that train
    fold's documents out of the queries and the dictionary alike, so that a recipe trained on
    the rest is scored fairly on that fold."""
    if held_out_fold >= 0 and (split != "train" or dataset == "cadec"):
        raise ValueError(f"held_out_fold applies to the train split of a PubTator corpus, not {dataset} {split}.")
    normalise = TextNormaliser.for_dataset(dataset, data_dir) if protocol == "standard" else TextNormaliser()
    if dataset == "cadec":
        folder = ds.cadec_fold(data_dir, fold)
        training = ds.read_cadec_pairs(folder / "train.txt")
        mentions, n_unlinkable = training if split == "train" else ds.read_cadec_pairs(folder / "test.txt"), 0
    elif split == TRAIN_FOLD:
        corpus, training = train_fold(ds.load_pubtator_split(dataset, "train", data_dir), fold)
        mentions, n_unlinkable = corpus.mentions, 0
    else:
        corpus = ds.load_pubtator_split(dataset, split, data_dir)
        if held_out_fold >= 0:
            corpus = ds.Corpus(fold_split(corpus.documents, held_out_fold, key=lambda doc: doc.doc_id)[1])
        mentions, n_unlinkable = corpus.mentions, corpus.n_unlinkable
        training_splits = ["train"] + (["dev"] if split == "test" else [])
        training = (corpus.mentions if held_out_fold >= 0 else
                    [m for s in training_splits for m in ds.load_pubtator_split(dataset, s, data_dir).mentions])
    dictionary = ds.base_dictionary(dataset, data_dir, vocabulary)
    if protocol == "standard":
        dictionary = _normalised_kb(dictionary, normalise)
    additions = [(dictionary.resolve_id(concept_id) or concept_id, name)
                 for concept_id, name in dictionary_additions(training, protocol, normalise)]
    trained = add_training_names(dictionary, additions, training_precedence)
    # A name of the dictionary the mentions are linked against (the base vocabulary's for train
    # queries, whose own texts are the training names): what a mention keeps as written
    # (build_queries), and what no undefined short form is guessed for (long_forms).
    abbreviations: Dict[str, Dict[str, str]] = {}
    names: Dict[str, List[str]] = {}
    if protocol == "standard" and dataset != "cadec":
        names = (dictionary if split == "train" else trained).name_lookup()
        abbreviations = document_abbreviations(corpus.documents, is_name=lambda text: name_key(text) in names)
    queries = build_queries(mentions, protocol, abbreviations, normalise, lambda text: name_key(text) in names)
    documents = {} if dataset == "cadec" else {doc.doc_id: doc.text for doc in corpus.documents}
    return Task(queries, trained, n_unlinkable, documents)
