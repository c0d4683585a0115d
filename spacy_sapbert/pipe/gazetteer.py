"""`sapbert_gazetteer`: marks the tokens of ontology names in a document as a feature for the NER.

Each token gets a tag (`token.tag_`, which the NER's tok2vec embeds beside the word's own
features) saying, for each source of names, whether it begins a name of that source ("B"), lies
inside one ("I"), or neither ("-"): sources are the bundled index's disease names, its chemical
names of the MeSH branches BC5CDR marks, its other MeSH D names (proteins, enzymes), and the
supplement's chemical and drug names. Names are compared lower-case, token by token, as the
NER's tokenizer splits them; a name is kept as a 64-bit hash of its tokens, so the table is
8 bytes and a label byte a name and nothing of the names' text is held in memory.

The tag is a hint, not a decision: the NER learns how far each source's names are entities of
its labels ("cold", "lead" are names too).
"""
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import srsly
from spacy.attrs import LOWER, TAG
from spacy.language import Language
from spacy.tokens import Doc

# The MeSH D branches whose names BC5CDR marks as chemicals: inorganic, organic, heterocyclic and
# polycyclic compounds, hormones, carbohydrates, lipids, amino acids, materials, mixtures and drugs
# by action; not enzymes, proteins, peptides, nucleic acids or biological factors (D08, D12.644,
# D12.776, D13, D23), which it leaves unmarked as NCBI-disease does.
CHEMICAL_TREES = ("D01", "D02", "D03", "D04", "D06", "D09", "D10", "D12.125", "D20", "D25", "D26", "D27")
# One bit for each source of names, in tag order.
SOURCES = ("disease", "chemical", "other-chemical", "supplement")
_MIX = np.uint64(0x9E3779B97F4A7C15)
# Every tag, indexed by its code (`Gazetteer.codes`).
TAGS = ["".join("-IB"[code // 3 ** k % 3] for k in range(len(SOURCES))) for code in range(3 ** len(SOURCES))]


def _ngram_hashes(lower: np.ndarray, length: int) -> np.ndarray:
    """The hash of every run of `length` tokens (lower-case ids), one per start."""
    out = lower[: len(lower) - length + 1].copy()
    with np.errstate(over="ignore"):
        for offset in range(1, length):
            out = out * _MIX + lower[offset: len(lower) - length + 1 + offset]
    return out


def name_hash(lower_ids: Sequence[int]) -> int:
    """The hash of one name's tokens (their lower-case ids), as `_ngram_hashes` makes it."""
    return int(_ngram_hashes(np.asarray(lower_ids, dtype=np.uint64), len(lower_ids))[0])


class Gazetteer:
    """The hashes of ontology names (sorted) with their sources as bits, and the tagging."""

    def __init__(self, hashes: Optional[np.ndarray] = None, bits: Optional[np.ndarray] = None, max_tokens: int = 6):
        self.hashes = np.zeros(0, dtype=np.uint64) if hashes is None else np.asarray(hashes, dtype=np.uint64)
        self.bits = np.zeros(0, dtype=np.uint8) if bits is None else np.asarray(bits, dtype=np.uint8)
        self.max_tokens = max_tokens

    @classmethod
    def from_names(cls, nlp: Language, names: Iterable[Tuple[str, int]], max_tokens: int = 6) -> "Gazetteer":
        """From (name, source index) pairs, each name split by nlp's tokenizer; names of more than
        max_tokens tokens are left out."""
        table = {}
        names = list(names)
        docs = nlp.tokenizer.pipe(name for name, _ in names)
        for doc, (_, source) in zip(docs, names):
            if 0 < len(doc) <= max_tokens:
                key = name_hash([token.lower for token in doc])
                table[key] = table.get(key, 0) | (1 << source)
        keys = np.fromiter(table, dtype=np.uint64, count=len(table))
        order = np.argsort(keys)
        bits = np.fromiter(table.values(), dtype=np.uint8, count=len(table))
        return cls(keys[order], bits[order], max_tokens)

    def codes(self, doc: Doc) -> np.ndarray:
        """Each token's tag as a number: digit k (base 3) is 2 where a name of source k begins,
        1 inside one, 0 neither, from that source's names matched left to right, the longest
        first (a name inside a longer one is no name of its own)."""
        n = len(doc)
        codes = np.zeros(n, dtype=np.int64)
        if not n or not len(self.hashes):
            return codes
        lower = doc.to_array(LOWER).astype(np.uint64)
        matches = []
        for length in range(1, min(self.max_tokens, n) + 1):
            grams = _ngram_hashes(lower, length)
            where = np.minimum(np.searchsorted(self.hashes, grams), len(self.hashes) - 1)
            for start in np.flatnonzero(self.hashes[where] == grams).tolist():
                matches.append((start, -length, int(self.bits[where[start]])))
        matches.sort()
        for k in range(len(SOURCES)):
            free = 0
            for start, negative_length, bits in matches:
                if start >= free and bits >> k & 1:
                    free = start - negative_length
                    codes[start] += 2 * 3 ** k
                    codes[start + 1: free] += 3 ** k
        return codes

    def tags(self, doc: Doc) -> List[str]:
        """Each token's tag: for each source, "B", "I" or "-" (see `codes`)."""
        return [TAGS[code] for code in self.codes(doc).tolist()]

    def to_disk(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "hashes.npy", self.hashes)
        np.save(path / "bits.npy", self.bits)
        srsly.write_json(path / "cfg.json", {"max_tokens": self.max_tokens, "sources": list(SOURCES)})

    @classmethod
    def from_disk(cls, path: Path) -> "Gazetteer":
        cfg = srsly.read_json(path / "cfg.json")
        return cls(np.load(path / "hashes.npy"), np.load(path / "bits.npy"), cfg["max_tokens"])


def bundled_names() -> Iterable[Tuple[str, int]]:
    """(name, source) pairs of the bundled index's KB and its supplement's names."""
    from spacy.lang.en.stop_words import STOP_WORDS

    from ..assets import BUNDLED_INDEX
    from ..kb.bundled import default_kb
    from ..search.supplement import NAMES_FILE, SUPPLEMENT_DIR, RowNames

    kb, label_types = default_kb()

    def keep(name: str) -> bool:
        return len(name) >= 3 and ", " not in name and name.lower() not in STOP_WORDS

    for concept in kb:
        if concept.has_type(CHEMICAL_TREES):
            source = 1
        elif concept.has_type(label_types.get("Chemical", ["D"])):
            source = 2
        elif concept.has_type(label_types.get("Disease", ["C", "F03", "MONDO"])):
            source = 0
        else:
            continue
        for name in concept.names:
            if keep(name):
                yield name, source
    supplement = BUNDLED_INDEX / SUPPLEMENT_DIR / NAMES_FILE
    if supplement.exists():
        for name in RowNames(supplement).all():
            if keep(name):
                yield name, 3


class GazetteerTags:
    """The pipeline component: sets token.tag_ from the gazetteer."""

    def __init__(self, nlp: Language, name: str = "sapbert_gazetteer", max_tokens: int = 6):
        self.nlp = nlp
        self.name = name
        self.gazetteer = Gazetteer(max_tokens=max_tokens)
        self._tag_ids: Optional[np.ndarray] = None

    def __call__(self, doc: Doc) -> Doc:
        if len(doc):
            # Added at the first document, not in __init__: loading a pipeline resets its string
            # store after the components are made, and a tag must be in it for token.tag_.
            if self._tag_ids is None:
                self._tag_ids = np.asarray([self.nlp.vocab.strings.add(tag) for tag in TAGS], dtype=np.uint64)
            doc.from_array([TAG], self._tag_ids[self.gazetteer.codes(doc)].reshape(-1, 1))
        return doc

    def initialize(self, get_examples=None, nlp: Optional[Language] = None) -> None:
        """Build the table from the bundled index's names, split by the pipeline's tokenizer."""
        self.gazetteer = Gazetteer.from_names(nlp or self.nlp, bundled_names(), self.gazetteer.max_tokens)

    def to_disk(self, path, exclude=tuple()) -> None:
        self.gazetteer.to_disk(Path(path))

    def from_disk(self, path, exclude=tuple()) -> "GazetteerTags":
        self.gazetteer = Gazetteer.from_disk(Path(path))
        return self


@Language.factory("sapbert_gazetteer", default_config={"max_tokens": 6})
def make_sapbert_gazetteer(nlp: Language, name: str, max_tokens: int) -> GazetteerTags:
    return GazetteerTags(nlp, name, max_tokens)
