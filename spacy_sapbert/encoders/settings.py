"""A model directory's settings: one file, SETTINGS_FILE (`sapbert.json`), read and written here.

It holds one section per thing a model records beside its weights:

    pooling   how it pools ("cls", "mean" or "mention"), so that `pooling="auto"` knows
    teacher   the model whose vector space a student embeds into ({"teacher", "fingerprint"})
    context   how a contextual model makes the text it encodes ({"window", "max_length"})
    sparse    the hybrid score's learned sparse term ({"sparse_weight", "analyzer", "ngram_range"})
    marginal  the synonym-marginal likelihood's temperature ({"tau"})
    base      where the weights training left unchanged come from ({"base", "from_base", "sha256"})
    training  the training record (data, steps, hardware, config, the run it started from)
    onnx      how an ONNX export was made (format, pooling, files and their checksums, ...)

Nothing here imports torch or the training code.
"""
import json
from pathlib import Path
from typing import Any, Dict, Union

from ..cache import replace_file

SETTINGS_FILE = "sapbert.json"

SECTIONS = ("pooling", "teacher", "context", "sparse", "marginal", "base", "training", "onnx")


class SettingsError(ValueError):
    """A model directory's settings cannot be read (a file that is not JSON, say)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SettingsError(f"{path} is not valid JSON") from None


def read_settings(model_dir: Union[str, Path]) -> Dict[str, Any]:
    """Read the settings a model directory records.

    model_dir (Union[str, Path]): The model directory. A path that is not a directory (a
        Hugging Face model name, say) records nothing.
    RETURNS (Dict[str, Any]): The sections of its SETTINGS_FILE (see the module docstring);
        empty when it has none.
    RAISES (SettingsError): A settings file is not valid JSON.
    """
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        return {}
    path = model_dir / SETTINGS_FILE
    if not path.is_file():
        return {}
    settings = _read_json(path)
    if not isinstance(settings, dict):
        raise SettingsError(f"{path} holds {type(settings).__name__}, not an object of sections")
    return settings


def write_settings(model_dir: Union[str, Path], **sections: Any) -> Path:
    """Merge sections into a model directory's SETTINGS_FILE.

    model_dir (Union[str, Path]): The model directory; made if it does not exist.
    **sections: The sections to write, by name (SECTIONS); each replaces the one the file held.
    RETURNS (Path): The settings file.
    RAISES (ValueError): A section name is not one of SECTIONS.
    """
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"Unknown settings section {unknown[0]!r}; use one of {', '.join(SECTIONS)}.")
    model_dir = Path(model_dir).expanduser()
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / SETTINGS_FILE
    settings = _read_json(path) if path.is_file() else {}
    settings.update(sections)
    text = json.dumps(settings, indent=2, sort_keys=True) + "\n"
    # Staged and renamed: a reader never finds half a file.
    replace_file(path, lambda staging: staging.write_text(text, encoding="utf-8"))
    return path
