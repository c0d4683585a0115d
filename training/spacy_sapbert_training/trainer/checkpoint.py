"""Checkpoints of a training run, and what resuming from one takes.

A checkpoint (output/checkpoints/step-NNNNNNNN/) holds the model, the optimizer, scheduler,
scaler and objective states, every process's RNG state, the step, the settings and the data's
identity, and last a manifest of its files' sizes and checksums. It is written under a temporary
name and renamed, so a run killed mid-save leaves the previous one whole; a damaged one is passed
over for the one before it, and a resumed run must train with the checkpoint's settings and data.
"""
import json
import logging
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from spacy_sapbert.cache import damaged_record, file_records
from spacy_sapbert.encoders.settings import write_settings
from spacy_sapbert.kb.concepts import PathLike

from .config import TrainConfig, TrainingConfigError

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
STATE_FILE = "state.pt"
METRICS_FILE = "metrics.jsonl"
# Written last into a checkpoint: every other file's size and sha256, so a damaged one is noticed.
MANIFEST_FILE = "files.json"
# Settings a resumed run may change: they do not alter what the finished run computes.
RESUMABLE_CHANGES = {"training.max_steps", "training.max_minutes", "training.save_every",
                     "training.keep_checkpoints", "training.log_every", "training.device", "training.compile"}
_STEP_DIR = re.compile(r"^step-(\d+)$")


def save_model(encoder: torch.nn.Module, tokenizer, path: PathLike, max_shard_size: str = "15MB",
               records: Optional[Dict[str, dict]] = None) -> Path:
    """Write a PairEncoder's weights (safetensors, sharded so no file passes GitHub-friendly
    sizes), tokenizer and pooling, so that spacy_sapbert.encoders.transformer.TorchEncoder loads
    the directory as trained, and `records` as sections of its settings file (sapbert.json, see
    spacy_sapbert.encoders.settings): "teacher" ({"teacher": model, "fingerprint": …}, the model
    whose vector space it embeds into, whose fingerprint it then answers to), "sparse" (its
    hybrid score's sparse weight) and the like."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    encoder.model.save_pretrained(path, max_shard_size=max_shard_size)
    tokenizer.save_pretrained(path)
    write_settings(path, pooling=encoder.pooling, **(records or {}))
    return path


def write_checkpoint(output: PathLike, encoder: torch.nn.Module, tokenizer, state: dict,
                     records: Dict[str, dict], keep: int) -> Path:
    """Write the checkpoint of step state["step"] under output/checkpoints (model, state,
    manifest), keeping the `keep` most recent; RETURNS its folder."""
    folder = Path(output) / CHECKPOINT_DIR
    target = folder / f"step-{state['step']:08d}"
    staging = folder / f".step-{state['step']:08d}.tmp"
    if staging.exists():
        shutil.rmtree(staging)
    save_model(encoder, tokenizer, staging / "model", records=records)
    torch.save(state, staging / STATE_FILE)
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    (staging / MANIFEST_FILE).write_text(json.dumps(file_records(staging, files), indent=1))
    if target.exists():
        shutil.rmtree(target)
    # A rename is atomic: a run killed mid-save leaves the previous checkpoint whole.
    staging.rename(target)
    kept = sorted(p for p in folder.iterdir() if _STEP_DIR.match(p.name))
    for old in kept[:-keep]:
        shutil.rmtree(old)
    return target


def checkpoints(output: PathLike) -> List[Path]:
    """The complete checkpoints under output/checkpoints, newest first."""
    folder = Path(output) / CHECKPOINT_DIR
    if not folder.exists():
        return []
    steps = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(steps, reverse=True) if (p / STATE_FILE).exists()]


def latest_checkpoint(output: PathLike) -> Optional[Path]:
    """The most recent complete checkpoint under output/checkpoints, or None."""
    found = checkpoints(output)
    return found[0] if found else None


def read_checkpoint(checkpoint: Path) -> dict:
    """A checkpoint's state, once its files match their manifest; OSError or ValueError when a
    file is damaged (truncated, emptied, overwritten)."""
    manifest = checkpoint / MANIFEST_FILE
    damaged = damaged_record(checkpoint, json.loads(manifest.read_text())) if manifest.exists() else None
    if damaged:
        raise ValueError(f"{damaged[0]} does not match its checksum")
    try:
        state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(f"{checkpoint / STATE_FILE} is unreadable ({err})") from None
    if not isinstance(state, dict) or "step" not in state:
        raise ValueError(f"{checkpoint / STATE_FILE} holds no training state")
    return state


def intact_checkpoint(output: PathLike) -> Tuple[Optional[Path], Optional[dict]]:
    """The newest checkpoint under `output` whose files are intact, with its state; a damaged
    one is passed over with a warning (None, None when there is none at all)."""
    found = checkpoints(output)
    if not found:
        logger.warning("--resume found no checkpoint under %s; starting from the beginning.", output)
        return None, None
    for checkpoint in found:
        try:
            return checkpoint, read_checkpoint(checkpoint)
        except (OSError, ValueError) as err:
            logger.warning("Checkpoint %s is damaged (%s); trying the one before it.", checkpoint.name, err)
    raise TrainingConfigError(
        f"Every checkpoint under {Path(output) / CHECKPOINT_DIR} is damaged; move that folder away to start "
        "over, or resume from a copy."
    )


def _flat(config: dict, prefix: str = "") -> Dict[str, object]:
    out: Dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_resumable(state: dict, config: TrainConfig, max_steps: int, data_identity: Callable[[], dict]) -> None:
    """Refuse to resume with settings or data (`data_identity()`, what the run trains on) other
    than the checkpoint's, naming the first that differs, unless [training] allow_changed_resume
    says otherwise."""
    if config.training.allow_changed_resume:
        return
    then, now = _flat(state.get("config", {})), _flat(config.to_dict())
    changed = sorted(k for k in set(then) | set(now)
                     if k not in RESUMABLE_CHANGES and k != "training.allow_changed_resume" and then.get(k) != now.get(k))
    if "config" in state and changed:
        raise TrainingConfigError(
            f"--resume: {changed[0]} was {then.get(changed[0])!r} in the checkpoint and is {now.get(changed[0])!r} "
            "now; resume with the checkpoint's settings, or set --training.allow_changed_resume true."
        )
    if "data" in state and state["data"] != data_identity():
        raise TrainingConfigError(
            f"--resume: the checkpoint trained on {state['data']}, this run on {data_identity()}; resume "
            "with the same data, or set --training.allow_changed_resume true."
        )
    if max_steps < state["step"]:
        raise TrainingConfigError(
            f"--resume: max_steps {max_steps} is below the checkpoint's step {state['step']}; raise it, or set "
            "--training.allow_changed_resume true."
        )


def rng_state() -> dict:
    """Every RNG's state (Python, NumPy, torch, CUDA where present), for a checkpoint."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Put back the RNG states rng_state took."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trim_metrics(output: PathLike, step: int) -> None:
    """Drop metric lines a killed run wrote after its last checkpoint."""
    path = Path(output) / METRICS_FILE
    if not path.exists():
        return
    rows = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
