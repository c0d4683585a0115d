"""FAISS indexes over name vectors, as ConceptIndex stores and searches them: the index types
(flat, scalar-quantised, HNSW graphs over either, IVF-PQ), projections, and a search graph set
over stored codes from its stored links instead of built again."""
from __future__ import annotations  # FAISS's types in signatures name a module not yet imported

import logging
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

logger = logging.getLogger(__name__)


class _FaissOnFirstUse:
    """FAISS, imported when one of its names is first read: spaCy imports this package's entry
    points whenever it makes any pipeline, `spacy.blank("en")` too, and importing FAISS took
    37 ms of that, where no index is loaded. Each read goes through an import statement, which
    Python's import lock keeps safe when threads load indexes at once (importlib's LazyLoader is
    not, before Python 3.12)."""

    def __getattr__(self, name: str):
        import faiss

        return getattr(faiss, name)


faiss = _FaissOnFirstUse()

# The links of an HNSW graph: its arrays as FAISS holds them, and its entry point and top level.
GRAPH_ARRAYS = ("levels", "offsets", "neighbors")

# Scalar quantisers: bits per dimension (faiss.ScalarQuantizer's names for them).
SQ_TYPES = {
    "sq8": "QT_8bit",
    "sq6": "QT_6bit",
    "sq4": "QT_4bit",
}


INDEX_TYPES = ("flat", *SQ_TYPES, "hnsw", *(f"hnsw-{q}" for q in SQ_TYPES), "ivfpq")


# Indexes train on at most this many vectors (a sample beyond) and are filled this many at a time.
TRAIN_ROWS = 1 << 18


ADD_CHUNK = 1 << 16


class ConceptIndexError(ValueError):
    """An index directory is missing, damaged, or does not match the encoder."""


def make_faiss_index(vectors: np.ndarray, index_type: str = "flat", dim: Optional[int] = None,
                     pq_bytes: Optional[int] = None) -> faiss.Index:
    """A trained FAISS inner-product index holding `vectors` (unit rows, float32).

    flat: exact search (4 bytes × dim per name). sq8, sq6, sq4: 8-, 6- or 4-bit scalar
    quantisation (4×, 5.3×, 8× smaller; sq8 is near exact). hnsw: graph search over exact
    vectors (much faster search, larger). hnsw-sq8 (and -sq6, -sq4): graph search over quantised
    vectors: about 10× faster search than flat and 2.3× smaller (MeSH C/F03/D: 64 MB against
    150 MB), with recall@10 0.993 against exact search. ivfpq: inverted lists + product
    quantisation (dim/4 bytes per name, 16× smaller, but recall@10 0.82 on the 924k open-ontology
    names; hnsw-sq8 keeps 0.99 there: README, "A UMLS-scale index").
    dim: first project onto the `dim` leading singular directions of `vectors`, randomly rotated
    within them (queries are projected inside the index), so each name costs dim instead of the
    model's dimensions.
    pq_bytes: for ivfpq, the bytes of each name's code (sub-quantisers of 8 bits; it must divide
    the dimensions), instead of dim/4: the bundled supplement's 40 for 320 dimensions.
    """
    n, in_dim = vectors.shape
    if index_type not in INDEX_TYPES:
        raise ConceptIndexError(f"Unknown index type {index_type!r}; use one of {', '.join(INDEX_TYPES)}.")
    if dim is not None and not 0 < dim <= in_dim:
        raise ConceptIndexError(f"Cannot project {in_dim}-d vectors to {dim} dimensions; give 1 to {in_dim}.")
    d = dim or in_dim
    metric = faiss.METRIC_INNER_PRODUCT
    if index_type == "flat":
        index = faiss.IndexFlatIP(d)
    elif index_type in SQ_TYPES:
        index = faiss.IndexScalarQuantizer(d, getattr(faiss.ScalarQuantizer, SQ_TYPES[index_type]), metric)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(d, 32, metric)
        index.hnsw.efConstruction = 80
        index.hnsw.efSearch = 128
    elif index_type.startswith("hnsw-"):
        index = _hnsw_sq(d, getattr(faiss.ScalarQuantizer, SQ_TYPES[index_type[len("hnsw-"):]]))
    else:  # ivfpq
        if n < 100_000:
            logger.warning(
                "IVF-PQ over %d names loses accuracy for little gain; flat or sq8 suit a KB this small.", n
            )
        n_lists = max(1, min(int(4 * math.sqrt(n)), n // 39))
        if pq_bytes is not None and (pq_bytes < 1 or d % pq_bytes):
            raise ConceptIndexError(f"pq_bytes ({pq_bytes}) must divide the index's {d} dimensions.")
        n_sub = pq_bytes or next(m for m in (d // 4, d // 2, d, 1) if m and d % m == 0)
        n_bits = max(1, min(8, int(math.log2(max(n, 2))) - 2))
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, n_lists, n_sub, n_bits, metric)
        index.nprobe = min(n_lists, 32)
    if d != in_dim:
        index = faiss.IndexPreTransform(_projection(vectors, d), index)
    if not index.is_trained:
        index.train(_training_sample(vectors))
    # In chunks: `vectors` may be a memmap of more names than fit in memory (streamed).
    for start in range(0, n, ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[start:start + ADD_CHUNK], dtype=np.float32))
    return index


def _training_sample(vectors: np.ndarray) -> np.ndarray:
    """All the vectors up to TRAIN_ROWS (every index of a KB that size trains as it always did);
    beyond, an even, sorted random sample of TRAIN_ROWS of them, read from disk if they are."""
    if len(vectors) <= TRAIN_ROWS:
        return np.ascontiguousarray(vectors, dtype=np.float32)
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), TRAIN_ROWS, replace=False))
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def _hnsw_sq(dim: int, qtype: int, m: int = 32, ef_construction: int = 200) -> faiss.IndexHNSWSQ:
    index = faiss.IndexHNSWSQ(dim, qtype, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.hnsw.efSearch = 256
    return index


def _projection(vectors: np.ndarray, dim: int) -> faiss.LinearTransform:
    """x → Vᵀx onto the `dim` leading right singular vectors of (a sample of) `vectors`.

    Not centred (unlike PCA), so inner products in the projected space approximate the original
    cosines rather than covariances."""
    sample = vectors
    if len(vectors) > 100_000:
        sample = vectors[np.random.default_rng(0).choice(len(vectors), 100_000, replace=False)]
    _, _, vt = np.linalg.svd(sample, full_matrices=False)
    # A random rotation within the kept subspace spreads its variance evenly over the
    # dimensions, so a scalar quantiser's per-dimension steps stay small in every one of them.
    rotation, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, dim)))
    matrix = rotation @ vt[:dim]
    transform = faiss.LinearTransform(vectors.shape[1], dim, False)
    faiss.copy_array_to_vector(np.ascontiguousarray(matrix, dtype=np.float32).ravel(), transform.A)
    transform.is_orthonormal = True
    transform.is_trained = True
    return transform


def _graph_over_codes(index: faiss.Index, links: Optional[Dict[str, np.ndarray]] = None) -> faiss.Index:
    """An HNSW graph over a scalar-quantised flat index's own codes (behind its projection, if
    any): the same quantiser, so every name keeps exactly its code and nothing is lost twice.

    This is how a bundled index is unpacked on a user's machine, so the graph is lighter than
    a fresh hnsw-sq8's (16 links a node, efConstruction 100): it builds in half the time and
    memory for the same dev Acc@1 (docs/results.md). links: the graph's links as graph_links
    returned them when it was built (the bundled index ships them, GRAPH_FILE), set instead of
    built: the same graph, byte for byte, in a second instead of 22 s."""
    outer, inner = faiss.downcast_index(index), _inside(index)
    graph = _hnsw_sq(inner.d, inner.sq.qtype, m=16, ef_construction=100)
    storage = faiss.downcast_index(graph.storage)
    storage.sq = inner.sq
    storage.is_trained = graph.is_trained = True
    if links is not None:
        _set_links(graph, inner, links)
    else:
        graph.add(inner.reconstruct_n(0, inner.ntotal))
    if not np.array_equal(faiss.vector_to_array(storage.codes), faiss.vector_to_array(inner.codes)):
        raise ConceptIndexError("Re-encoding the quantised vectors changed their codes; convert from an exact index.")
    if outer is inner:
        return graph
    wrapped = faiss.IndexPreTransform(graph)
    for i in reversed(range(outer.chain.size())):
        wrapped.prepend_transform(_copy_linear(faiss.downcast_VectorTransform(outer.chain.at(i))))
    return wrapped


def _inside(index: faiss.Index) -> faiss.Index:
    """The index inside an IndexPreTransform (a projected index), or `index` itself, downcast."""
    outer = faiss.downcast_index(index)
    return faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexPreTransform) else outer


def graph_links(index: faiss.Index) -> Dict[str, np.ndarray]:
    """The links of the HNSW graph in `index` (hnsw-sq*, projected or not), as _graph_over_codes
    takes them back: what GRAPH_FILE stores beside a scalar-quantised index's codes."""
    hnsw = _inside(index).hnsw
    links = {name: faiss.vector_to_array(getattr(hnsw, name)) for name in GRAPH_ARRAYS}
    links["entry"] = np.array([hnsw.entry_point, hnsw.max_level], dtype=np.int64)
    return links


def _set_links(graph: faiss.IndexHNSW, codes: faiss.Index, links: Dict[str, np.ndarray]) -> None:
    """Give `graph` (fresh, over `codes`' quantiser) `codes`' codes and the stored `links`."""
    missing = [name for name in (*GRAPH_ARRAYS, "entry") if name not in links]
    levels = links.get("levels", np.zeros(0))
    if missing or len(levels) != codes.ntotal or len(links["offsets"]) != codes.ntotal + 1 \
            or int(links["offsets"][-1]) != len(links["neighbors"]):
        raise ConceptIndexError(f"The stored graph links do not fit the index's {codes.ntotal} codes; "
                                "rebuild the index.")
    storage = faiss.downcast_index(graph.storage)
    faiss.copy_array_to_vector(faiss.vector_to_array(codes.codes), storage.codes)
    storage.ntotal = graph.ntotal = codes.ntotal
    hnsw = graph.hnsw
    for name in GRAPH_ARRAYS:
        array = links[name]
        faiss.copy_array_to_vector(np.ascontiguousarray(array, dtype=faiss.vector_to_array(getattr(hnsw, name)).dtype),
                                   getattr(hnsw, name))
    hnsw.entry_point, hnsw.max_level = (int(v) for v in links["entry"])


def _copy_linear(transform: faiss.LinearTransform) -> faiss.LinearTransform:
    copy = faiss.LinearTransform(transform.d_in, transform.d_out, transform.have_bias)
    faiss.copy_array_to_vector(faiss.vector_to_array(transform.A), copy.A)
    faiss.copy_array_to_vector(faiss.vector_to_array(transform.b), copy.b)
    copy.is_orthonormal, copy.is_trained = transform.is_orthonormal, True
    return copy


def _split_pre_transform(index: faiss.Index) -> Tuple[List[Tuple[np.ndarray, Optional[np.ndarray]]], faiss.Index]:
    """(the linear maps of an IndexPreTransform's chain in float64, as (A, b or None), and the
    index inside); ([], index) for any other index.

    FAISS applies a transform with BLAS, whose one-row and many-row kernels round differently,
    so a query's projection, and so its scores, would depend on how many queries share the
    call. Projected in float64 and rounded to float32, a query's vector is the same bit for bit
    whatever its batch."""
    outer = faiss.downcast_index(index)
    if not isinstance(outer, faiss.IndexPreTransform):
        return [], index
    maps = []
    for i in range(outer.chain.size()):
        transform = faiss.downcast_VectorTransform(outer.chain.at(i))
        if not isinstance(transform, faiss.LinearTransform):
            return [], index
        matrix = faiss.vector_to_array(transform.A).astype(np.float64).reshape(transform.d_out, transform.d_in)
        bias = faiss.vector_to_array(transform.b).astype(np.float64) if transform.have_bias else None
        maps.append((matrix, bias))
    return maps, outer.index


def _search_params(index: faiss.Index, selector) -> faiss.SearchParameters:
    base = faiss.downcast_index(index)
    if isinstance(base, faiss.IndexPreTransform):  # it hands the parameters to the index inside
        base = faiss.downcast_index(base.index)
    if isinstance(base, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=selector, efSearch=base.hnsw.efSearch)
    if isinstance(base, faiss.IndexIVF):
        return faiss.SearchParametersIVF(sel=selector, nprobe=base.nprobe)
    return faiss.SearchParameters(sel=selector)
