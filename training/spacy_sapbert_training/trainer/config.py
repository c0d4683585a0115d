"""The training recipe: a config file's [model], [objective] and [training] sections as
dataclasses, and the spaCy-style dotted overrides (`--training.lr 1e-4`) the training commands
take. Configs use spaCy's .cfg syntax but are read with confection, so training needs no spaCy
(a GPU machine set up for training only may have none).
"""
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from confection import Config

from spacy_sapbert.encoders.base import POOLINGS
from spacy_sapbert.kb.concepts import PathLike

from .objective import ObjectiveConfig

AMP_MODES = ("auto", "bf16", "fp16", "none")
SCHEDULES = ("constant", "linear")


class TrainingConfigError(ValueError):
    """A training config or its overrides cannot be used."""


@dataclass
class ModelConfig:
    """The `[model]` section: which encoder to train and how it pools.

    name_or_path: a local model directory or a Hugging Face name.
    pooling: "cls" ([CLS] token, SapBERT's), "mean", "mention" (contextual mentions: the
        [Ms] and [Me] tokens are added and a text pools the tokens between them), or "auto":
        what the model directory records (sentence-transformers models such as
        all-MiniLM-L6-v2 record mean), else cls.
    max_length: tokens per name; longer names are truncated.
    layers: keep only these transformer layers (indices; empty keeps all): a smaller student
        started from a trained model's layers.
    freeze: parameters whose names start with one of these stay as loaded
        ("embeddings.word_embeddings": the shipped model then stores only what changed).
    adapter: "" (train the model itself) or a registered model wrapper (registry.model_wrappers,
        checked when the Trainer is built): "lora" trains only a peft LoRA adapter on every
        linear layer of the encoder, saved alone (the SapBERT paper's bottleneck adapters have
        no peft type; LoRA is the low-rank adapter peft keeps).
    adapter_fraction: the adapter's size as a fraction of the base's parameters (the paper's
        0.13 and 0.01); the LoRA rank is chosen to come nearest (spacy_sapbert_training.trainer.adapters).
    window: with "mention" pooling (contextual mentions, pairs from spacy_sapbert_training.data.contexts), the
        spaCy tokens of a mention's window, recorded so that the pipe makes its windows alike;
        max_length must then hold a window's wordpieces (96).
    """

    name_or_path: str = ""
    pooling: str = "auto"
    max_length: int = 25
    layers: List[int] = field(default_factory=list)
    freeze: List[str] = field(default_factory=list)
    adapter: str = ""
    adapter_fraction: float = 0.01
    window: int = 32


@dataclass
class OptimConfig:
    """The `[training]` section.

    batch_size: pairs per micro-batch in each process (256 pairs = 512 names).
    grad_accum: micro-batches per optimizer step.
    max_steps: optimizer steps; 0 lets `epochs` decide.
    epochs: passes over the pairs when max_steps is 0.
    lr, weight_decay, warmup_steps: AdamW with a linear warm-up, then the schedule.
    schedule: "constant" (the rate stays at lr) or "linear" (it falls to 0 at max_steps).
    max_minutes: stop at the first step after this many minutes of this process's training,
        with a checkpoint, so that `--resume` continues (0: no limit). For machines rented by
        the hour: each call trains a slice and the run ends as an uninterrupted one would.
    amp: "auto" (bf16 on GPUs that have it, else fp16 with a gradient scaler; none on CPU),
        "bf16", "fp16" or "none".
    compile: wrap the encoder in torch.compile.
    device: "auto", "cpu" or "cuda" (under torchrun each process takes its local GPU).
    seed: seeds the data order and every RNG.
    save_every: checkpoint every this many steps (and always at the end).
    keep_checkpoints: how many recent checkpoints to keep.
    log_every: write a metrics line every this many steps.
    allow_changed_resume: let --resume continue with settings or data other than the
        checkpoint's (off: refused, naming the first difference; max_steps, max_minutes and
        the checkpoint and logging settings may always change).
    """

    batch_size: int = 256
    grad_accum: int = 1
    max_steps: int = 0
    epochs: int = 1
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0
    schedule: str = "constant"
    max_minutes: float = 0.0
    amp: str = "auto"
    compile: bool = False
    device: str = "auto"
    seed: int = 0
    save_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    allow_changed_resume: bool = False


@dataclass
class TrainConfig:
    """A whole training recipe: model, objective and optimisation."""

    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    training: OptimConfig = field(default_factory=OptimConfig)

    @classmethod
    def from_disk(cls, path: PathLike, overrides: Optional[Dict[str, object]] = None) -> "TrainConfig":
        """Read a config file (spaCy's .cfg syntax) with dotted overrides such as
        {"training.max_steps": 2}; unknown sections or keys are refused."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"Training config {path} does not exist; see configs/ for the recipes.")
        try:
            written = Config().from_disk(path, interpolate=False)
            # Every section present, empty where the file has none, so that an override can set
            # a setting of a section the file leaves to its defaults (--objective.prototypes.pool 5).
            _every_section(written, cls)
            raw = Config().from_str(written.to_str(), overrides=overrides or {}, interpolate=True)
        except Exception as err:  # confection raises several error types for bad files and overrides
            raise TrainingConfigError(f"{path}: the config cannot be read ({err}); fix it or the override.") from None
        return cls.from_dict(raw, where=str(path))

    @classmethod
    def from_dict(cls, raw: dict, where: str = "config") -> "TrainConfig":
        """The recipe from a config's sections (sub-sections such as [objective.marginal]
        nested); unknown sections or settings are refused, naming where a setting belongs."""
        config = _section(cls, raw, where)
        config.validate(where)
        return config

    def validate(self, where: str = "config") -> None:
        if self.model.adapter and not 0 < self.model.adapter_fraction < 1:
            raise TrainingConfigError(f"{where}: [model] adapter_fraction must lie between 0 and 1, not {self.model.adapter_fraction}.")
        if self.model.adapter and self.model.pooling == "mention":
            raise TrainingConfigError(f"{where}: [model] pooling \"mention\" adds marker tokens to the model, which an "
                                      "adapter cannot train; train the model itself (adapter = \"\").")
        if self.model.pooling not in POOLINGS + ("auto",):
            raise TrainingConfigError(f"{where}: [model] pooling must be one of {', '.join(POOLINGS)} or auto, not {self.model.pooling!r}.")
        if self.training.amp not in AMP_MODES:
            raise TrainingConfigError(f"{where}: [training] amp must be one of {', '.join(AMP_MODES)}, not {self.training.amp!r}.")
        for key in ("batch_size", "grad_accum", "save_every", "keep_checkpoints", "log_every"):
            if getattr(self.training, key) < 1:
                raise TrainingConfigError(f"{where}: [training] {key} must be at least 1.")
        if self.training.schedule not in SCHEDULES:
            raise TrainingConfigError(f"{where}: [training] schedule must be one of {', '.join(SCHEDULES)}, not {self.training.schedule!r}.")
        if self.training.max_minutes < 0:
            raise TrainingConfigError(f"{where}: [training] max_minutes must be ≥ 0.")
        if self.training.max_steps < 0 or self.training.epochs < 1:
            raise TrainingConfigError(f"{where}: [training] max_steps must be ≥ 0 and epochs ≥ 1.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_overrides(args: Sequence[str]) -> Dict[str, object]:
    """spaCy-style dotted overrides (`--training.lr 1e-4`, `--training.amp=bf16`, a bare
    `--training.compile` meaning true) as {"training.lr": 0.0001, …}; values are JSON where they
    parse, else strings. Written here so training needs no spaCy (a bare GPU machine has none)."""
    result: Dict[str, object] = {}
    args = list(args)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--") or "." not in arg:
            raise TrainingConfigError(f"Cannot read the override {arg!r}; write it as --section.setting value.")
        key = arg[2:]
        if "=" in key:
            key, value = key.split("=", 1)
        elif not args or args[0].startswith("--"):
            value = "true"
        else:
            value = args.pop(0)
        try:
            result[key.replace("-", "_")] = json.loads(value)
        except ValueError:
            result[key.replace("-", "_")] = value
    return result


def _section(kind, values: dict, where: str, name: str = ""):
    """`kind` (a dataclass) from a config section's `values`, its sub-sections built alike."""
    fields = {f.name: f for f in dataclasses.fields(kind)}
    kwargs = {}
    for key, value in values.items():
        found = fields.get(key)
        nested = found is not None and dataclasses.is_dataclass(found.type)
        if found is None or nested != isinstance(value, dict):
            raise TrainingConfigError(f"{where}: {_unknown(kind, key, name)}")
        kwargs[key] = _section(found.type, value, where, f"{name}.{key}" if name else key) if nested else value
    return kind(**kwargs)


def _unknown(kind, key: str, name: str) -> str:
    """What to say of `key`, which section `name` (of dataclass `kind`) does not have."""
    fields = dataclasses.fields(kind)
    if not name:
        return f"unknown section [{key}]; use {', '.join('[' + f.name + ']' for f in fields)}."
    home = [f.name for f in fields if dataclasses.is_dataclass(f.type)
            and key in {g.name for g in dataclasses.fields(f.type)}]
    if home:
        return f"[{name}] has no setting {key!r}; it belongs in [{name}.{home[0]}]."
    known = sorted(f.name if not dataclasses.is_dataclass(f.type) else f"[{name}.{f.name}]" for f in fields)
    return f"[{name}] has no setting {key!r}; known settings are {', '.join(known)}."


def _every_section(values: dict, kind) -> None:
    """Add to `values` (a config's sections) an empty section for each of `kind`'s sections
    (dataclass fields) and sub-sections it lacks."""
    for found in dataclasses.fields(kind):
        if dataclasses.is_dataclass(found.type) and isinstance(values.setdefault(found.name, {}), dict):
            _every_section(values[found.name], found.type)
