"""The index for an index name (`resolve_index`): the bundled index's search graph, set from
the links it ships over its own codes and cached on first use; for a model the bundled index
was not built with, an index of the bundled KB's names; or a knowledge base by name
(kb/named.py); each built and cached under `SPACY_SAPBERT_CACHE`."""
import json
import logging
import shutil
from pathlib import Path
from typing import Optional

from ..assets import BUNDLED_INDEX, DEFAULT, DEFAULT_EXACT, DEFAULT_INDEX_TYPE
from ..kb.bundled import bundled_index_meta, default_kb
from ..cache import cache_dir, cached_build
from ..encoders.loading import exact_encoder

logger = logging.getLogger(__name__)

# The names of the index whose graph build was timed (the bundled one's).
GRAPH_NAMES_MEASURED = 207_999


def resolve_index(index: str, encoder) -> Optional[Path]:
    """`index` as a path, or the default index for `encoder` for "default" (its exact flat
    version for "default-exact")."""
    if index == DEFAULT:
        return default_index_path(encoder)
    if index == DEFAULT_EXACT:
        return exact_default_index_path(encoder)
    from ..kb.named import is_named

    if is_named(index):
        return named_index_path(index, encoder)
    return Path(index)


def named_index_path(name: str, encoder, output: Optional[Path] = None) -> Path:
    """The index of the knowledge base `name` (kb.named: "mesh", "hpo", …, "umls:META_FOLDER")
    for `encoder`, built on first use (the names encoded with a progress bar, then an HNSW graph
    over 8-bit codes) and cached, or written to `output`."""
    from ..kb.named import NAMED_KBS, label_types, named_kb, umls_files
    from .index import ConceptIndex

    precision = getattr(encoder, "precision", "fp32")
    cached = output or cache_dir() / f"{named_index_prefix(name)}{encoder.fingerprint}-{precision}"

    def build(staging: Path) -> None:
        vectors = staging.with_name(staging.name + ".vectors")  # streamed there while encoding
        index = ConceptIndex.build(named_kb(name), encoder, index_type="hnsw-sq8", show_progress=True,
                                   work_dir=vectors)
        index.meta["label_types"] = label_types(name)
        index.save(staging)
        shutil.rmtree(vectors, ignore_errors=True)

    named = NAMED_KBS.get(name)
    if named is None and not _cached_index_intact(cached, encoder.fingerprint):
        umls_files(name)  # a folder without MRCONSO.RRF: its sentence before a build is announced
    takes = named.measured.split(",")[0] if named and named.measured else "minutes to tens of minutes on a CPU"
    return cached_build(cached, build, lambda path: _cached_index_intact(path, encoder.fingerprint),
                        f"index of the {name} knowledge base", takes=takes)


def named_index_prefix(name: str) -> str:
    """The start of the cached index's folder name for the knowledge base `name`, for any model:
    its sources' versions are in it, so that an index of older sources is not taken for it."""
    import hashlib

    from ..kb.named import NAMED_KBS, SOURCE_VERSION

    slug = name if name in NAMED_KBS else "umls-" + hashlib.sha256(name.encode()).hexdigest()[:12]
    version = NAMED_KBS[name].version if name in NAMED_KBS else SOURCE_VERSION
    return f"index-named-{slug}-{version}-"


def _index_matches(path: Path, fingerprint: str) -> bool:
    meta = path / "meta.json"
    if not meta.exists():
        return False
    try:
        return json.loads(meta.read_text()).get("model_fingerprint") == fingerprint
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _cached_index_intact(path: Path, fingerprint: str) -> bool:
    """Whether the cached index at `path` was built for `fingerprint` and every file still
    matches its checksum (or is unchanged since it last did)."""
    if not _index_matches(path, fingerprint):
        return False
    from .index import verify_files

    return verify_files(path, json.loads((path / "meta.json").read_text())) is None


def exact_default_index_path(encoder) -> Path:
    """The cached exact (flat) index of the default KB's names for `encoder`, built on first use
    (minutes on CPU, with a progress bar): the exact fp32 path, and, for a model the bundled
    index was not built with, the source of its compressed default."""
    bundled = bundled_index_meta()
    kb_meta = bundled or {"kb_name": "mesh-C-F03-D"}
    cached = cache_dir() / f"index-{kb_meta['kb_name']}-{encoder.fingerprint}"

    def build(staging: Path) -> None:
        from .index import ConceptIndex

        kb, label_types = default_kb()
        index = ConceptIndex.build(kb, exact_encoder(encoder), show_progress=True)
        index.meta["label_types"] = label_types
        if kb_meta.get("name_precedence"):  # the names the bundled index leaves to preferred concepts
            index = index.converted("flat", prefer=kb_meta["name_precedence"])
        index.save(staging)

    intact = lambda path: _cached_index_intact(path, encoder.fingerprint)  # noqa: E731
    # the KB by what a user knows it as (its kb_name is the recipe's, "linking_kb")
    what = "the bundled KB" if bundled else "MeSH C/F03/D"
    return cached_build(cached, build, intact, f"exact index of {what} for {encoder}",
                        takes="about 20 min for the bundled KB's 230k names")


def default_index_path(encoder) -> Path:
    """The default index for `encoder`, cached: the bundled index's search graph (built over its
    own codes once, in seconds) when the bundled index was built with `encoder`'s model; else
    the exact index of the default KB (built first when missing) in DEFAULT_INDEX_TYPE."""
    from .builders import SQ_TYPES
    from .index import ConceptIndex

    meta = bundled_index_meta()
    if meta is not None and _index_matches(BUNDLED_INDEX, encoder.fingerprint):
        if meta["index_type"] not in SQ_TYPES:  # already a searchable graph or flat index
            return BUNDLED_INDEX
        return graph_over_codes(BUNDLED_INDEX, encoder, "bundled index's search graph")
    source = exact_default_index_path(encoder)
    cached = source.with_name(f"{source.name}-{DEFAULT_INDEX_TYPE}")
    return cached_build(cached, lambda staging: ConceptIndex.load(source).converted(DEFAULT_INDEX_TYPE).save(staging),
                        lambda path: _cached_index_intact(path, encoder.fingerprint),
                        f"{DEFAULT_INDEX_TYPE} index of {source.name}")


def graph_over_codes(compact: Path, encoder, what: str = "") -> Path:
    """The cached HNSW graph over the codes of the scalar-quantised index at `compact` (the
    bundled index, or its copy in a saved pipeline), made once: set from the links `compact`
    stores, or built; keyed by the codes' and concepts' checksums, so every copy of one index
    shares it."""
    from .index import GRAPH_FILE, ConceptIndex

    meta = json.loads((compact / "meta.json").read_text(encoding="utf-8"))
    graph_type = f"hnsw-{meta['index_type']}"
    cached = _graph_cache(meta)
    # Built: 22 s for the bundled index's 208k names on 2 quiet cores, about in proportion beyond;
    # set from the links the index stores (the bundled one does): about a second, its KB copied as stored.
    per_graph = 1 if GRAPH_FILE in meta.get("files", {}) else 22
    seconds = per_graph * meta.get("n_names", GRAPH_NAMES_MEASURED) / GRAPH_NAMES_MEASURED
    return cached_build(cached, lambda staging: ConceptIndex.load(compact).converted(graph_type).save(staging),
                        lambda path: _cached_index_intact(path, encoder.fingerprint),
                        what or f"search graph of {compact}", takes=f"about {seconds:.0f} s", seconds=seconds)


def _graph_cache(meta: dict) -> Path:
    """Where the graph over a compact index's codes is cached: keyed by the codes' checksum, and
    by those of the concepts file, the row names and the answers the copy keeps, so that a copy of
    older concepts or answers, or one made before the index stored its row names, is not taken."""
    from .index import ANSWERS_FILE, ROW_NAMES_FILE

    files = meta["files"]
    digest = files["index.faiss"]["sha256"][:16]
    kept = "".join(f"-{files[name]['sha256'][:8]}" for name in ("concepts.json", ROW_NAMES_FILE, ANSWERS_FILE)
                   if name in files)
    return cache_dir() / f"index-graph-{digest}{kept}-hnsw-{meta['index_type']}"


def compact_source(index_path: Path) -> Optional[Path]:
    """The compact index whose codes the searched graph at `index_path` was built over (what a
    saved pipeline stores instead of the graph), or None."""
    meta = bundled_index_meta()
    if meta is None or not meta.get("files"):
        return None
    from .builders import SQ_TYPES

    if meta["index_type"] in SQ_TYPES and Path(index_path) == _graph_cache(meta):
        return BUNDLED_INDEX
    return None
