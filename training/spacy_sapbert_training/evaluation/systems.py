"""Linking systems the harness compares: exact match, char 3-gram tf-idf, scispaCy's
EntityLinker, and any encoder. Each ranks concepts of one dictionary for a list of texts."""
import contextlib
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from spacy_sapbert.cache import cache_dir
from spacy_sapbert.kb.concepts import KnowledgeBase, name_key

from ..data.embeddings import EmbeddingCache

logger = logging.getLogger(__name__)

SYSTEMS = ("exact", "tfidf", "scispacy", "model")


class LinkingSystem:
    """Ranks the concepts of a dictionary for mention texts."""

    name = "system"
    build_seconds = 0.0

    def rank(self, texts: Sequence[str], k: int = 10) -> List[List[str]]:
        """For each text, up to k distinct concept ids, best first."""
        raise NotImplementedError


class ExactMatch(LinkingSystem):
    """Concepts having a name equal to the text (case and spacing ignored)."""

    name = "exact"

    def __init__(self, kb: KnowledgeBase):
        self.lookup = kb.name_lookup()

    def rank(self, texts, k=10):
        return [self.lookup.get(name_key(t), [])[:k] for t in texts]


class CharTfidf(LinkingSystem):
    """scispaCy's candidate-generator scoring (char 3-gram tf-idf cosine), searched exactly."""

    name = "tfidf"

    def __init__(self, kb: KnowledgeBase, min_df: int = 1):
        from spacy_sapbert.search.tfidf import SparseConceptIndex

        start = time.perf_counter()
        self.index = SparseConceptIndex(kb, min_df=min_df)
        self.build_seconds = time.perf_counter() - start

    def rank(self, texts, k=10):
        """Plain cosine ranking, ties in dictionary row order (a stable sort), not the pipe's
        tie_order: a baseline takes none of the linker's rules."""
        from spacy_sapbert.search.tfidf import QUERY_BLOCK

        texts, found = list(texts), []
        for start in range(0, len(texts), QUERY_BLOCK):
            for row in self.index.score_rows(texts[start : start + QUERY_BLOCK]):
                concepts: dict = {}
                for r in np.argsort(-row, kind="stable"):
                    if row[r] <= 0 or len(concepts) == k:
                        break
                    concepts.setdefault(self.index.concept_ids[self.index.row_concepts[r]])
                found.append(list(concepts))
        return found


def _kb_digest(kb: KnowledgeBase) -> str:
    digest = hashlib.sha256()
    for name, cui in zip(*kb.name_rows()):
        digest.update(f"{cui}\t{name}\n".encode())
    return digest.hexdigest()[:16]


class EncoderSystem(LinkingSystem):
    """Any Hugging Face encoder: names embedded exactly (fp32), mentions at `precision` (fp32,
    or int8 through ONNX Runtime, as the pipe links by default), FAISS search of `index_type`,
    candidates from the pipe's own `CandidateGenerator`, so a figure here is the pipe's.

    sparse_weight: BioSyn's hybrid score, cosine + sparse_weight × char 3-gram tf-idf cosine,
    of each mention's best dense rows, as the pipe scores them (ranking.hybrid.HybridRescorer); None takes
    the weight the model was trained with (its "sparse" settings section), else 0 (dense only).
    names_precision: int8 embeds the names with the exact model's int8 export instead, as
    build-index --precision int8 does (cached apart from the fp32 vectors).
    marginal_tau: rank concepts by their synonym-marginal score at this tau, as the pipe does
    (candidates.Scoring); None takes the model's recorded tau, else 0 (best name).
    calibration: the index whose names calibrate an int8 export (encoders.export.export_onnx);
    None: the bundled index's, as the pipe with its default index."""

    name = "model"

    def __init__(self, kb: KnowledgeBase, model: str, pooling: str = "auto", batch_size: int = 256,
                 device: str = "cpu", precision: str = "fp32", index_type: str = "flat",
                 sparse_weight: Optional[float] = None, names_precision: str = "fp32",
                 marginal_tau: Optional[float] = None, calibration: Optional[Path] = None):
        from spacy_sapbert.encoders.models import resolve_model
        from spacy_sapbert.candidates import CandidateGenerator, CandidateSettings, Scoring, read_scoring
        from spacy_sapbert.search.index import ConceptIndex
        from spacy_sapbert.encoders.loading import exact_encoder, load_encoder

        # Names are embedded by the exact model of the vector space (a student's
        # teacher); mentions by the model itself, at `precision`.
        model_path = resolve_model(model)
        self.query_encoder = load_encoder(model_path, precision, pooling=pooling, batch_size=batch_size, device=device,
                                          calibration=calibration)
        self.encoder = exact_encoder(self.query_encoder)
        # A model trained on contexts is asked mentions in their windows (evaluate.part_windows).
        self.context = getattr(self.query_encoder, "context", None)
        names_encoder = self.encoder if names_precision == "fp32" else load_encoder(
            self.encoder.name_or_path, names_precision, pooling=pooling, batch_size=batch_size)
        self.cache = EmbeddingCache(names_encoder)
        start = time.perf_counter()
        names, _ = kb.name_rows()
        index = ConceptIndex.from_vectors(kb, self.cache.encode(names), self.encoder.fingerprint, index_type)
        recorded = read_scoring(model_path)
        self.sparse_weight = recorded.sparse_weight if sparse_weight is None else sparse_weight
        hybrid = None
        if self.sparse_weight:
            from spacy_sapbert.ranking.hybrid import HybridRescorer

            hybrid = HybridRescorer(names, self.sparse_weight)
        # Every concept it retrieves, none left out by a threshold: the harness scores ranks.
        settings = CandidateSettings(threshold=0.0, cache_size=0)
        scoring = Scoring(sparse_weight=self.sparse_weight, marginal_tau=marginal_tau)
        self.generator = CandidateGenerator(self.query_encoder, index, settings, scoring, content_rule=False,
                                            recorded=recorded, hybrid=hybrid)
        self.build_seconds = time.perf_counter() - start

    def rank(self, texts, k=10):
        return [[c for c, _ in row] for row in self.rank_scored(texts, k)]

    def rank_scored(self, texts: Sequence[str], k: int = 10) -> List[List[Tuple[str, float]]]:
        """For each text, up to k (concept id, score) pairs, best first, as the pipe scores them."""
        self.generator.settings.k = self.generator.settings.max_entities_per_mention = k
        return self.generator.generate([(text, ()) for text in texts])

    def similarity(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each pair of texts, compared as the linker compares a mention with
        a name: one text through the model, the other through the model that embeds names
        (itself, unless it was trained against another model's frozen keys), averaged over the
        two ways round."""
        first, second = list(first), list(second)
        if self.encoder is self.query_encoder:
            return (self.encoder.encode(first) * self.encoder.encode(second)).sum(1)
        mention_first = (self.query_encoder.encode(first) * self.encoder.encode(second)).sum(1)
        mention_second = (self.encoder.encode(first) * self.query_encoder.encode(second)).sum(1)
        return (mention_first + mention_second) / 2


class _NumpyWithFloat32For16:
    """numpy, except that `float16` is float32: newer scipy has no float16 sparse matrices."""

    float16 = np.float32

    def __getattr__(self, name):
        return getattr(np, name)


@contextlib.contextmanager
def _float32_sparse_vectors(candidate_generation):
    """Let scispaCy build its index on scipy >= 1.11: skip its version check and store its
    tf-idf vectors as float32 instead of float16."""
    check, numpy_module = candidate_generation.scipy_supports_sparse_float16, candidate_generation.numpy
    candidate_generation.scipy_supports_sparse_float16 = lambda: True
    candidate_generation.numpy = _NumpyWithFloat32For16()
    try:
        yield
    finally:
        candidate_generation.scipy_supports_sparse_float16 = check
        candidate_generation.numpy = numpy_module


class ScispacyLinker(LinkingSystem):
    """scispaCy's own candidate generator (char 3-gram tf-idf + nmslib HNSW), built over the
    same dictionary once and cached: its index takes minutes for 100k names."""

    name = "scispacy"

    def __init__(self, kb: KnowledgeBase, k_candidates: int = 30, folder: Optional[Path] = None):
        from scispacy import candidate_generation as cg
        from scispacy.linking_utils import KnowledgeBase as ScispacyKB

        from spacy_sapbert.kb.formats import write_jsonl

        self.k_candidates = k_candidates
        folder = Path(folder or cache_dir() / "scispacy" / _kb_digest(kb))
        kb_file = folder / "kb.jsonl"
        folder.mkdir(parents=True, exist_ok=True)
        if not kb_file.exists():
            write_jsonl(kb, kb_file, scispacy=True)
        scispacy_kb = ScispacyKB(str(kb_file))
        timing = folder / "build_seconds.json"
        paths = cg.LinkerPaths.from_directory(folder)
        if not paths.is_locally_cached():
            logger.warning("Building scispaCy's index over %d names once (minutes); cached in %s.",
                           kb.n_names, folder)
            start = time.perf_counter()
            with _float32_sparse_vectors(cg):
                cg.create_tfidf_ann_index(str(folder), scispacy_kb)
            timing.write_text(json.dumps({"seconds": time.perf_counter() - start}))
        self.build_seconds = json.loads(timing.read_text())["seconds"] if timing.exists() else float("nan")
        aliases, vectorizer, ann_index = paths.load()
        self.generator = cg.CandidateGenerator(ann_index, vectorizer, aliases, scispacy_kb)

    def rank(self, texts, k=10):
        ranked = []
        for candidates in self.generator(list(texts), self.k_candidates):
            # As scispaCy's EntityLinker: a concept scores as its best alias.
            best = sorted(((max(c.similarities), c.concept_id) for c in candidates), key=lambda x: -x[0])
            ranked.append([cui for _, cui in best][:k])
        return ranked
