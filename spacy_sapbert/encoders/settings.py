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

A directory written before SETTINGS_FILE holds each section in a file of its own
(LEGACY_FILES); `read_settings` assembles the same sections from them, so such a directory
(the bundled models, a cached ONNX export) loads as it is. Nothing writes those files any more.

Nothing here imports torch or the training code.
"""
import json
from pathlib import Path
from typing import Any, Dict, Union

from ..cache import replace_file

SETTINGS_FILE = "sapbert.json"

# The file each section was written to before SETTINGS_FILE; "pooling" held {"pooling": name}.
LEGACY_FILES = {
    "pooling": "sapbert_pooling.json",
    "teacher": "sapbert_teacher.json",
    "context": "sapbert_context.json",
    "sparse": "sapbert_sparse.json",
    "marginal": "sapbert_marginal.json",
    "base": "sapbert_base.json",
    "training": "training.json",
    "onnx": "sapbert_onnx.json",
}
SECTIONS = tuple(LEGACY_FILES)


class SettingsError(ValueError):
    """A model directory's settings cannot be read (a file that is not JSON, say)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SettingsError(f"{path} is not valid JSON") from None


def _legacy_sections(model_dir: Path) -> Dict[str, Any]:
    """The sections a directory written before SETTINGS_FILE holds in LEGACY_FILES."""
    sections = {}
    for section, name in LEGACY_FILES.items():
        path = model_dir / name
        if path.is_file():
            record = _read_json(path)
            sections[section] = record["pooling"] if section == "pooling" else record
    return sections


def read_settings(model_dir: Union[str, Path]) -> Dict[str, Any]:
    """Read the settings a model directory records.

    model_dir (Union[str, Path]): The model directory. A path that is not a directory (a
        Hugging Face model name, say) records nothing.
    RETURNS (Dict[str, Any]): The sections of its SETTINGS_FILE (see the module docstring),
        over those its LEGACY_FILES hold: SETTINGS_FILE wins a section both record. Empty when
        it records none.
    RAISES (SettingsError): A settings file is not valid JSON.
    """
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        return {}
    sections = _legacy_sections(model_dir)
    path = model_dir / SETTINGS_FILE
    if path.is_file():
        settings = _read_json(path)
        if not isinstance(settings, dict):
            raise SettingsError(f"{path} holds {type(settings).__name__}, not an object of sections")
        sections.update(settings)
    return sections


def write_settings(model_dir: Union[str, Path], **sections: Any) -> Path:
    """Merge sections into a model directory's SETTINGS_FILE (never into its LEGACY_FILES).

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
