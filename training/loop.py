"""One training loop for self-alignment pretraining and fine-tuning.

Two kinds of data feed it, each with its objective. Pairs of synonyms (`cui||name1||name2`,
PairBatches) are read in seeded, epoch-wise shuffled batches; both names are embedded,
labelled with their concept, and fed to an in-batch metric loss (SapBERT's, for large batches
on a GPU). Queries against frozen keys (QueryBatches over training.keys key sets) are embedded
and scored against a whole dictionary (BioSyn's synonym-marginal likelihood: the CPU recipe);
the model then answers to the keys' model fingerprint, so the index built by that model serves
it. The loop runs on one
CPU, one GPU, or several processes under `torchrun` (DDP; NCCL on GPUs, gloo on CPUs). It
checkpoints model, optimizer, scheduler, scaler, every RNG and the step every `save_every`
steps; the data position follows from the step, so `resume` continues exactly where a killed
run stopped and ends with the same weights as an uninterrupted run.
"""
import dataclasses
import json
import logging
import os
import pickle
import platform
import random
import re
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
from confection import Config
from tqdm.auto import tqdm

from spacy_sapbert.encoder import load_transformer, pool, resolve_device
from spacy_sapbert.encoding import POOLINGS, POOLING_FILE, TEACHER_FILE, detect_pooling
from spacy_sapbert.cache import damaged_record, file_records, file_sha256
from spacy_sapbert.encoding import SPARSE_FILE

from .keys import KeySet, read_keyset
from .objective import KeyTargets, ObjectiveConfig, SelfAlignmentObjective, SynonymMarginalLoss
from .pairs import read_pairs

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]
AMP_MODES = ("auto", "bf16", "fp16", "none")
SCHEDULES = ("constant", "linear")
CHECKPOINT_DIR = "checkpoints"
STATE_FILE = "state.pt"
METRICS_FILE = "metrics.jsonl"
RUN_FILE = "training.json"


class TrainingConfigError(ValueError):
    """A training config or its overrides cannot be used."""


@dataclass
class ModelConfig:
    """The `[model]` section: which encoder to train and how it pools.

    name_or_path: a local model directory or a Hugging Face name.
    pooling: "cls" ([CLS] token, SapBERT's), "mean", or "auto": what the model directory
        records (sentence-transformers models such as all-MiniLM-L6-v2 record mean), else cls.
    max_length: tokens per name; longer names are truncated.
    layers: keep only these transformer layers (indices; empty keeps all): a smaller student
        started from a trained model's layers.
    freeze: parameters whose names start with one of these stay as loaded
        ("embeddings.word_embeddings": the shipped model then stores only what changed).
    """

    name_or_path: str = ""
    pooling: str = "auto"
    max_length: int = 25
    layers: List[int] = field(default_factory=list)
    freeze: List[str] = field(default_factory=list)


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
        with a checkpoint, so that `--resume` continues (0: no limit). For machines lent by
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
            raw = Config().from_disk(path, overrides=overrides or {}, interpolate=True)
        except Exception as err:  # confection raises several error types for bad files and overrides
            raise TrainingConfigError(f"{path}: the config cannot be read ({err}); fix it or the override.") from None
        return cls.from_dict(raw, where=str(path))

    @classmethod
    def from_dict(cls, raw: dict, where: str = "config") -> "TrainConfig":
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, values in raw.items():
            if name not in sections:
                raise TrainingConfigError(
                    f"{where}: unknown section [{name}]; use {', '.join('[' + s + ']' for s in sections)}."
                )
            section_cls = {"model": ModelConfig, "objective": ObjectiveConfig, "training": OptimConfig}[name]
            known = {f.name for f in dataclasses.fields(section_cls)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise TrainingConfigError(
                    f"{where}: [{name}] has no setting {unknown[0]!r}; known settings are {', '.join(sorted(known))}."
                )
            kwargs[name] = section_cls(**values)
        config = cls(**kwargs)
        config.validate(where)
        return config

    def validate(self, where: str = "config") -> None:
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


class PairEncoder(torch.nn.Module):
    """A Hugging Face encoder with [CLS] or mean pooling: the part of the model that trains.

    It pools with spacy_sapbert.encoder.pool, as the runtime Encoder does, so a saved model
    links as it trained.
    """

    def __init__(self, model: torch.nn.Module, pooling: str, freeze: Sequence[str] = ()):
        super().__init__()
        self.model = model
        self.pooling = pooling
        # The model's own pooler (BERT's tanh head) never sees a gradient: freezing it keeps
        # AdamW from decaying it for nothing and DDP from waiting for gradients that never come.
        frozen = ("pooler.", *freeze)
        for name, param in model.named_parameters():
            if name.startswith(frozen):
                param.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        return pool(hidden, attention_mask, self.pooling)


class PairBatches:
    """Seeded, epoch-wise shuffled micro-batches of synonym pairs, addressable by index.

    Micro-batch m of the whole run is a pure function of (seed, m), so a resumed run reads
    exactly the batches the killed run would have read. Each global micro-batch holds
    batch_size × world_size pairs; process `rank` takes every world_size-th of them.
    """

    def __init__(self, pairs: Sequence[Tuple[str, str, str]], batch_size: int, seed: int,
                 rank: int = 0, world_size: int = 1):
        if len(pairs) < world_size:
            raise TrainingConfigError(
                f"There are {len(pairs)} pairs but {world_size} processes; give more pairs or fewer processes."
            )
        label_of: Dict[str, int] = {}
        self.labels = torch.tensor([label_of.setdefault(cui, len(label_of)) for cui, _, _ in pairs])
        self.names1 = [p[1] for p in pairs]
        self.names2 = [p[2] for p in pairs]
        self.n_concepts = len(label_of)
        self.global_batch = batch_size * world_size
        self.per_epoch = max(1, len(pairs) // self.global_batch)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._epoch, self._order = -1, None

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            self._order = torch.randperm(len(self.names1), generator=generator)
            self._epoch = epoch
        return self._order

    def __getitem__(self, index: int) -> Tuple[List[str], torch.Tensor]:
        """Names (first of each pair, then second) and their labels for micro-batch `index`."""
        epoch, position = divmod(index, self.per_epoch)
        rows = self._epoch_order(epoch)[position * self.global_batch : (position + 1) * self.global_batch]
        rows = rows[self.rank :: self.world_size].tolist()
        names = [self.names1[i] for i in rows] + [self.names2[i] for i in rows]
        labels = self.labels[rows]
        return names, torch.cat([labels, labels])

    def record(self) -> dict:
        return {"n_pairs": len(self.names1), "n_concepts": self.n_concepts}


class QueryBatches:
    """Seeded, epoch-wise shuffled micro-batches of queries against frozen key sets,
    addressable by index.

    Each micro-batch holds queries of one key set (the loss scores them against its keys);
    an epoch takes every key set's queries once, in batches interleaved in a seeded order, so
    the mix follows the key sets' sizes. Micro-batch m is a pure function of (seed, m), and
    process `rank` takes every world_size-th query of each global batch, as PairBatches does.
    With `sparse`, each batch also carries its queries' char 3-gram tf-idf cosines to every key
    (BioSyn's sparse score). `repeats` visits a key set's queries that many times an epoch
    (default once), to weigh a small task up.
    """

    def __init__(self, keysets: Sequence[KeySet], batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 sparse: bool = False, repeats: Optional[Sequence[int]] = None):
        from spacy_sapbert.sparse import SparseConceptIndex

        self.keysets = list(keysets)
        self.repeats = list(repeats or [1] * len(self.keysets))
        self.targets = [keys.targets() for keys in self.keysets]
        self.sparse = [SparseConceptIndex.from_rows(k.names, k.row_concept, k.concepts) for k in self.keysets] if sparse else None
        self.global_batch = batch_size * world_size
        self.counts = [len(keys.queries) // self.global_batch for keys in self.keysets]
        self.counts = [count * repeat for count, repeat in zip(self.counts, self.repeats)]
        if not sum(self.counts):
            raise TrainingConfigError(
                f"The key sets hold fewer queries than one batch of {self.global_batch}; give more queries "
                "or a smaller [training] batch_size."
            )
        self.per_epoch = sum(self.counts)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._epoch, self._plan = -1, []

    def _epoch_plan(self, epoch: int) -> List[Tuple[int, torch.Tensor]]:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            plan = []
            for which, (keys, repeat) in enumerate(zip(self.keysets, self.repeats)):
                for _ in range(repeat):
                    order = torch.randperm(len(keys.queries), generator=generator)
                    plan.extend((which, order[b * self.global_batch : (b + 1) * self.global_batch])
                                for b in range(len(keys.queries) // self.global_batch))
            self._plan = [plan[i] for i in torch.randperm(len(plan), generator=generator).tolist()]
            self._epoch = epoch
        return self._plan

    def __getitem__(self, index: int) -> Tuple[List[str], KeyTargets]:
        """Query texts and their targets for micro-batch `index`."""
        epoch, position = divmod(index, self.per_epoch)
        which, rows = self._epoch_plan(epoch)[position]
        rows = rows[self.rank :: self.world_size].tolist()
        queries, (positives, own) = self.keysets[which].queries, self.targets[which]
        texts = [queries[r][0] for r in rows]
        sparse = None if self.sparse is None else torch.from_numpy(self.sparse[which].score_rows(texts))
        return texts, KeyTargets(
            which, [torch.from_numpy(positives[r]) for r in rows], [torch.from_numpy(own[r]) for r in rows], sparse)

    def record(self) -> dict:
        return {"key_sets": [{k: keys.meta.get(k) for k in ("source", "n_names", "n_concepts", "n_queries")}
                             for keys in self.keysets],
                "n_queries": sum(len(keys.queries) for keys in self.keysets)}


@dataclass
class Distributed:
    """Where this process stands in a torchrun job (rank 0 of 1 when run alone)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> "Distributed":
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return cls()
        return cls(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))


def _amp_settings(mode: str, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """The autocast dtype (None for none) and whether a gradient scaler is needed."""
    if mode == "auto":
        if device.type != "cuda":
            return None, False
        mode = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if mode == "none":
        return None, False
    if mode == "fp16" and device.type != "cuda":
        raise TrainingConfigError("amp='fp16' needs a CUDA GPU; use 'bf16' or 'none' on a CPU.")
    return (torch.bfloat16, False) if mode == "bf16" else (torch.float16, True)


def _rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_model(encoder: PairEncoder, tokenizer, path: PathLike, max_shard_size: str = "15MB",
               records: Optional[Dict[str, dict]] = None) -> Path:
    """Write weights (safetensors, sharded so no file passes GitHub-friendly sizes), tokenizer
    and pooling, so that spacy_sapbert.encoder.Encoder loads the directory as trained, and
    `records` as JSON files beside them: TEACHER_FILE ({"teacher": model, "fingerprint": …},
    the model whose vector space it embeds into, whose fingerprint it then answers to) and
    SPARSE_FILE (its hybrid score's sparse weight)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    encoder.model.save_pretrained(path, max_shard_size=max_shard_size)
    tokenizer.save_pretrained(path)
    (path / POOLING_FILE).write_text(json.dumps({"pooling": encoder.pooling}) + "\n")
    for name, record in (records or {}).items():
        (path / name).write_text(json.dumps(record, indent=2) + "\n")
    return path


def keep_layers(model: torch.nn.Module, layers: Sequence[int]) -> torch.nn.Module:
    """`model` (a BERT-like encoder) with only the transformer `layers` it names, in order."""
    n = len(model.encoder.layer)
    wrong = [i for i in layers if not 0 <= i < n]
    if wrong:
        raise TrainingConfigError(f"[model] layers {wrong} do not exist: the model has layers 0 to {n - 1}.")
    model.encoder.layer = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
    model.config.num_hidden_layers = len(layers)
    return model


_STEP_DIR = re.compile(r"^step-(\d+)$")


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


# Written last into a checkpoint: every other file's size and sha256, so a damaged one is noticed.
MANIFEST_FILE = "files.json"
# Settings a resumed run may change: they do not alter what the finished run computes.
RESUMABLE_CHANGES = {"training.max_steps", "training.max_minutes", "training.save_every",
                     "training.keep_checkpoints", "training.log_every", "training.device", "training.compile"}


def _flat(config: dict, prefix: str = "") -> Dict[str, object]:
    out: Dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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


class Trainer:
    """Trains a PairEncoder: on synonym pairs with a SelfAlignmentObjective, or on queries
    against frozen key sets with the SynonymMarginalLoss ([objective] loss "synonym_marginal").

    config: the recipe. pairs_path: a `cui||name1||name2` file (gzip if it ends in .gz), for
        pair losses. keys: key-set folders (training.keys), for "synonym_marginal".
    output: the run directory; it gets checkpoints/, metrics.jsonl, training.json and model/.
    step_callback: called as callback(step, loss) after every optimizer step (tests use it).
    """

    def __init__(self, config: TrainConfig, pairs_path: Optional[PathLike], output: PathLike,
                 step_callback: Optional[Callable[[int, float], None]] = None, keys: Sequence[PathLike] = ()):
        self.config = config
        self.pairs_path = Path(pairs_path) if pairs_path else None
        self.keys = [key_source(k) for k in keys]
        self.output = Path(output)
        self.step_callback = step_callback
        self.dist = Distributed.from_env()
        self.teacher: Optional[dict] = None
        if not config.model.name_or_path:
            raise TrainingConfigError("[model] name_or_path is empty; give the base model with --model.")
        uses_keys = config.objective.loss == "synonym_marginal"
        if uses_keys and not self.keys:
            raise TrainingConfigError("[objective] loss 'synonym_marginal' trains against frozen keys; give key sets "
                                      "with --keys (python -m training.keys writes them).")
        if not uses_keys and self.pairs_path is None:
            raise TrainingConfigError(f"[objective] loss {config.objective.loss!r} trains on synonym pairs; give them "
                                      "with --pairs (python -m training.pairs writes them).")

    # -- setup ---------------------------------------------------------------------------
    def _device(self) -> torch.device:
        device = resolve_device(self.config.training.device)
        if device.type == "cuda" and self.dist.world_size > 1:
            device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(device)
        return device

    def _init_distributed(self, device: torch.device) -> None:
        if self.dist.world_size > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")

    def _load_model(self, source: PathLike):
        try:
            # float32 master weights even from an fp16 package: AdamW steps on fp16 weights round away.
            tokenizer, model = load_transformer(source)
        except OSError as err:
            raise TrainingConfigError(
                f"Could not load the model {str(source)!r} ({str(err).splitlines()[0]}); give a local model directory."
            ) from None
        return tokenizer, model

    # -- the run -------------------------------------------------------------------------
    def train(self, resume: bool = False) -> Path:
        """Run to max_steps (continuing from the latest checkpoint when `resume`); return the
        directory of the final model."""
        cfg, run = self.config, self.config.training
        device = self._device()
        self._init_distributed(device)
        checkpoint, state = self._intact_checkpoint() if resume else (None, None)
        seed_everything(run.seed + self.dist.rank)
        source = checkpoint / "model" if checkpoint else cfg.model.name_or_path
        tokenizer, model = self._load_model(source)
        if cfg.model.layers and checkpoint is None:
            model = keep_layers(model, cfg.model.layers)
        model.train()
        pooling = cfg.model.pooling
        if pooling == "auto":
            pooling = detect_pooling(Path(cfg.model.name_or_path).expanduser())
        encoder = PairEncoder(model, pooling, cfg.model.freeze).to(device)
        batches, objective = self._data(source)
        objective.to(device)
        refresh = cfg.objective.refresh_keys_every if isinstance(batches, QueryBatches) else 0
        max_steps = run.max_steps or max(1, run.epochs * batches.per_epoch // run.grad_accum)

        no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
        trainable = [(n, p) for n, p in encoder.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for n, p in trainable if not n.endswith(no_decay)], "weight_decay": run.weight_decay},
            {"params": [p for n, p in trainable if n.endswith(no_decay)], "weight_decay": 0.0},
        ]
        learned = [p for p in objective.parameters() if p.requires_grad]  # the hybrid's sparse weight
        if learned:
            groups.append({"params": learned, "weight_decay": 0.0, "lr": cfg.objective.sparse_weight_lr})
        optimizer = torch.optim.AdamW(groups, lr=run.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(run.warmup_steps, run.schedule, max_steps))
        amp_dtype, needs_scaler = _amp_settings(run.amp, device)
        scaler = torch.amp.GradScaler("cuda", enabled=needs_scaler)

        step = 0
        if checkpoint is not None:
            self._check_resumable(state, max_steps)
            if state["world_size"] != self.dist.world_size:
                raise TrainingConfigError(
                    f"{checkpoint} was written by {state['world_size']} processes, not {self.dist.world_size}; "
                    "resume with the same number of processes."
                )
            optimizer.load_state_dict(state["optimizer"])
            objective.load_state_dict(state.get("objective", {}), strict=False)
            scheduler.load_state_dict(state["scheduler"])
            scaler.load_state_dict(state["scaler"])
            _set_rng_state(state["rng"][self.dist.rank])
            step = state["step"]
            self.elapsed_before = state.get("elapsed", 0.0)
            logger.info("Resuming from %s (step %d).", checkpoint, step)
        else:
            self.elapsed_before = 0.0
        if self.dist.is_main:
            self.output.mkdir(parents=True, exist_ok=True)
            self._trim_metrics(step)

        model_to_run: torch.nn.Module = encoder
        if run.compile:
            model_to_run = torch.compile(model_to_run)
        if self.dist.world_size > 1:
            ids = [device.index] if device.type == "cuda" else None
            model_to_run = torch.nn.parallel.DistributedDataParallel(model_to_run, device_ids=ids)

        self.objective = objective

        def micro_step(index: int, sync: bool) -> Tuple[float, int]:
            names, labels = batches[index]
            tokens = tokenizer(names, padding=True, truncation=True, max_length=cfg.model.max_length,
                               return_tensors="pt").to(device)
            labels = labels.to(device)
            sync_context = nullcontext() if sync or self.dist.world_size == 1 else model_to_run.no_sync()
            with sync_context:
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    embeddings = model_to_run(tokens["input_ids"], tokens["attention_mask"])
                loss, n_found = objective(embeddings, labels)
                scaler.scale(loss / run.grad_accum).backward()
            return float(loss.detach()), n_found

        if refresh:  # keys as the model of this step embeds them; exact on resume when save_every is a multiple
            self._refresh_keys(encoder, tokenizer, batches, objective, device)
        start = time.perf_counter()
        start_step = step
        self.stopped_early = False
        progress = tqdm(total=max_steps, initial=step, desc="training", unit="step", disable=not self.dist.is_main)
        while step < max_steps:
            losses, triplets = [], 0
            for j in range(run.grad_accum):
                loss, n = micro_step(step * run.grad_accum + j, sync=j == run.grad_accum - 1)
                losses.append(loss)
                triplets += n
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if refresh and step % refresh == 0 and step < max_steps:
                self._refresh_keys(encoder, tokenizer, batches, objective, device)
            mean_loss = sum(losses) / len(losses)
            progress.update(1)
            progress.set_postfix(loss=f"{mean_loss:.4f}")
            elapsed = time.perf_counter() - start
            out_of_time = step < max_steps and self._out_of_time(elapsed, device)
            if self.dist.is_main and (step % run.log_every == 0 or step == max_steps or out_of_time):
                self._log({
                    "step": step, "loss": round(mean_loss, 6), objective.metric_name: triplets,
                    "lr": scheduler.get_last_lr()[0],
                    "steps_per_s": round((step - start_step) / elapsed, 4) if elapsed else None,
                    "elapsed_s": round(self.elapsed_before + elapsed, 2),
                })
            if step % run.save_every == 0 or step == max_steps or out_of_time:
                self._checkpoint(encoder, tokenizer, optimizer, scheduler, scaler, step, self.elapsed_before + elapsed)
            if self.step_callback is not None:
                self.step_callback(step, mean_loss)
            if out_of_time:
                progress.close()
                self.stopped_early = True
                logger.info("Stopped after %.1f min at step %d of %d; --resume continues.", elapsed / 60, step, max_steps)
                return latest_checkpoint(self.output) / "model"
        progress.close()
        wall = self.elapsed_before + time.perf_counter() - start
        final = self.output / "model"
        if self.dist.is_main:
            self._write_final(encoder, tokenizer, final, step, wall, batches, device)
        if self.dist.world_size > 1:
            dist.barrier()
        return final

    def _data(self, source: PathLike):
        """The batches and the objective: pairs with a pair loss, or key sets with the synonym-
        marginal loss, whose model the trained one answers to (self.teacher)."""
        cfg, run = self.config, self.config.training
        if self.pairs_path is not None and cfg.objective.loss != "synonym_marginal":
            pairs = read_pairs(self.pairs_path)
            if not pairs:
                raise TrainingConfigError(f"{self.pairs_path} holds no pairs; build them with `python -m training.pairs`.")
            batches = PairBatches(pairs, run.batch_size, run.seed, self.dist.rank, self.dist.world_size)
            return batches, SelfAlignmentObjective(cfg.objective)
        keysets = [read_keyset(folder) for folder, _ in self.keys]
        if not cfg.objective.refresh_keys_every:  # symmetric training embeds its own keys: it answers to itself
            self.teacher = self._keys_model(keysets, source)
        objective = cfg.objective
        hybrid = objective.sparse_weight > 0
        batches = QueryBatches(keysets, run.batch_size, run.seed, self.dist.rank, self.dist.world_size, sparse=hybrid,
                               repeats=[repeat for _, repeat in self.keys])
        keys = [torch.from_numpy(k.vectors) for k in keysets]
        return batches, SynonymMarginalLoss(keys, objective.tau, objective.top_k, objective.own_rows,
                                            objective.identity_weight, objective.sparse_weight,
                                            objective.learn_sparse_weight and hybrid)

    def _keys_model(self, keysets: Sequence[KeySet], source: PathLike) -> dict:
        """The model that embedded the frozen keys, which the trained model will answer to; the
        model training starts from must already answer to it (start in the keys' space)."""
        from spacy_sapbert.encoder import TorchEncoder

        spaces = {(keys.meta["model"], keys.fingerprint) for keys in keysets}
        if len(spaces) > 1:
            raise TrainingConfigError(f"The key sets were embedded by different models ({sorted(spaces)}); "
                                      "write them all with one --model.")
        (model, fingerprint), = spaces
        own = TorchEncoder(source, max_length=self.config.model.max_length).fingerprint
        if own != fingerprint:
            raise TrainingConfigError(
                f"The key sets were embedded by {model!r} (fingerprint {fingerprint}), but {source} answers to "
                f"{own}: the query encoder must start in the keys' vector space. Start from that model, or "
                "write the key sets with this one (python -m training.keys --model)."
            )
        return {"teacher": model, "fingerprint": fingerprint}

    @torch.no_grad()
    def _refresh_keys(self, encoder: PairEncoder, tokenizer, batches: "QueryBatches", objective, device) -> None:
        """Re-embed every key set's names with the model as it is now (symmetric training)."""
        from spacy_sapbert.encoding import length_sorted_batches

        was_training = encoder.training
        encoder.eval()
        for which, keys in enumerate(batches.keysets):
            vectors = torch.zeros(len(keys.names), keys.vectors.shape[1], device=device)
            for rows, texts in length_sorted_batches(keys.names, 256):
                tokens = tokenizer(texts, padding=True, truncation=True, max_length=self.config.model.max_length,
                                   return_tensors="pt").to(device)
                vectors[torch.as_tensor(rows, device=device)] = torch.nn.functional.normalize(
                    encoder(tokens["input_ids"], tokens["attention_mask"]).float(), dim=-1)
            objective.keysets[which] = vectors
        encoder.train(was_training)

    def _out_of_time(self, elapsed: float, device: torch.device) -> bool:
        """Whether max_minutes is spent; under DDP every process takes rank 0's answer."""
        limit = self.config.training.max_minutes
        if not limit or self.dist.world_size == 1:
            return bool(limit) and elapsed >= 60 * limit
        over = torch.tensor([float(elapsed >= 60 * limit)], device=device)
        dist.broadcast(over, src=0)
        return bool(over.item())

    # -- outputs -------------------------------------------------------------------------
    def _log(self, row: dict) -> None:
        with (self.output / METRICS_FILE).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    def _trim_metrics(self, step: int) -> None:
        """Drop metric lines a killed run wrote after its last checkpoint."""
        path = self.output / METRICS_FILE
        if not path.exists():
            return
        rows = [line for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["step"] <= step]
        path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")

    def _intact_checkpoint(self) -> Tuple[Optional[Path], Optional[dict]]:
        """The newest checkpoint whose files are intact, with its state; a damaged one is passed
        over with a warning (None, None when there is none at all)."""
        found = checkpoints(self.output)
        if not found:
            logger.warning("--resume found no checkpoint under %s; starting from the beginning.", self.output)
            return None, None
        for checkpoint in found:
            try:
                return checkpoint, read_checkpoint(checkpoint)
            except (OSError, ValueError) as err:
                logger.warning("Checkpoint %s is damaged (%s); trying the one before it.", checkpoint.name, err)
        raise TrainingConfigError(
            f"Every checkpoint under {self.output / CHECKPOINT_DIR} is damaged; move that folder away to start "
            "over, or resume from a copy."
        )

    def _data_identity(self) -> dict:
        """What the run trains on, as a resumed run must find it again."""
        if self.pairs_path is not None and self.config.objective.loss != "synonym_marginal":
            return {"pairs_sha256": file_sha256(self.pairs_path)}
        return {"keys": [f"{k}*{r}" if r > 1 else str(k) for k, r in self.keys]}

    def _check_resumable(self, state: dict, max_steps: int) -> None:
        """Refuse to resume with settings or data other than the checkpoint's (naming the first
        that differs), unless [training] allow_changed_resume says otherwise."""
        if self.config.training.allow_changed_resume:
            return
        then, now = _flat(state.get("config", {})), _flat(self.config.to_dict())
        changed = sorted(k for k in set(then) | set(now)
                         if k not in RESUMABLE_CHANGES and k != "training.allow_changed_resume" and then.get(k) != now.get(k))
        if "config" in state and changed:
            raise TrainingConfigError(
                f"--resume: {changed[0]} was {then.get(changed[0])!r} in the checkpoint and is {now.get(changed[0])!r} "
                "now; resume with the checkpoint's settings, or set --training.allow_changed_resume true."
            )
        if "data" in state and state["data"] != self._data_identity():
            raise TrainingConfigError(
                f"--resume: the checkpoint trained on {state['data']}, this run on {self._data_identity()}; resume "
                "with the same data, or set --training.allow_changed_resume true."
            )
        if max_steps < state["step"]:
            raise TrainingConfigError(
                f"--resume: max_steps {max_steps} is below the checkpoint's step {state['step']}; raise it, or set "
                "--training.allow_changed_resume true."
            )

    def _checkpoint(self, encoder, tokenizer, optimizer, scheduler, scaler, step: int, elapsed: float) -> None:
        rng = [_rng_state()]
        if self.dist.world_size > 1:
            rng = [None] * self.dist.world_size
            dist.all_gather_object(rng, _rng_state())
        if self.dist.is_main:
            folder = self.output / CHECKPOINT_DIR
            target = folder / f"step-{step:08d}"
            staging = folder / f".step-{step:08d}.tmp"
            if staging.exists():
                shutil.rmtree(staging)
            save_model(encoder, tokenizer, staging / "model", records=self._records())
            torch.save({
                "step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "objective": self.objective.state_dict(),
                "scaler": scaler.state_dict(), "rng": rng, "world_size": self.dist.world_size,
                "elapsed": elapsed, "config": self.config.to_dict(), "data": self._data_identity(),
            }, staging / STATE_FILE)
            files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
            (staging / MANIFEST_FILE).write_text(json.dumps(file_records(staging, files), indent=1))
            if target.exists():
                shutil.rmtree(target)
            # A rename is atomic: a run killed mid-save leaves the previous checkpoint whole.
            staging.rename(target)
            kept = sorted(p for p in folder.iterdir() if _STEP_DIR.match(p.name))
            for old in kept[: -self.config.training.keep_checkpoints]:
                shutil.rmtree(old)
        if self.dist.world_size > 1:
            dist.barrier()

    def _records(self) -> Dict[str, dict]:
        """What a saved model records beside its weights: the keys' model it answers to, and the
        hybrid's learned sparse weight."""
        records = {TEACHER_FILE: self.teacher} if self.teacher else {}
        weight = getattr(self.objective, "sparse_weight", None)
        if weight is not None and self.config.objective.sparse_weight > 0:
            records[SPARSE_FILE] = {"sparse_weight": round(float(weight.detach()), 6), "analyzer": "char_wb", "ngram_range": [3, 3]}
        return records

    def _write_final(self, encoder, tokenizer, final: Path, step: int, wall: float,
                     batches, device: torch.device) -> None:
        save_model(encoder, tokenizer, final, records=self._records())
        hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
        data = ({"pairs": str(self.pairs_path), "pairs_sha256": file_sha256(self.pairs_path)}
                if isinstance(batches, PairBatches) else
                {"keys": [f"{k}*{r}" if r > 1 else str(k) for k, r in self.keys], "teacher": self.teacher})
        record = {
            "base_model": self.config.model.name_or_path,
            **data,
            **batches.record(),
            "steps": step,
            "names_per_step": (2 if isinstance(batches, PairBatches) else 1)
            * self.config.training.batch_size * self.config.training.grad_accum * self.dist.world_size,
            "wall_seconds": round(wall, 1),
            "hardware": f"{self.dist.world_size} × {hardware} ({device.type})",
            "torch": torch.__version__,
            "config": self.config.to_dict(),
        }
        earlier = Path(self.config.model.name_or_path) / RUN_FILE
        if earlier.exists():  # the run that made the starting model (pretraining, for a fine-tuned one)
            record["started_from"] = json.loads(earlier.read_text())
        (final / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")
        logger.info("Saved the trained model to %s after %d steps (%.0f s).", final, step, wall)


def key_source(source: Union[PathLike, Tuple[PathLike, int]]) -> Tuple[Path, int]:
    """A key-set folder and how many times an epoch visits its queries: "corpus/keys/cadec*3"
    (or a (folder, repeats) pair); a bare folder is visited once."""
    if isinstance(source, tuple):
        return Path(source[0]), int(source[1])
    text = str(source)
    folder, star, times = text.rpartition("*")
    if star and times.isdigit() and int(times) > 0:
        return Path(folder), int(times)
    return Path(text), 1


def lr_factor(warmup_steps: int, schedule: str, max_steps: int) -> Callable[[int], float]:
    """The learning-rate multiplier after `step` optimizer steps: a linear warm-up over
    warmup_steps, then 1 ("constant") or a linear fall to 0 at max_steps ("linear")."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "linear":
            return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))
        return 1.0

    return factor


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


def train_from_cli(config_path: PathLike, pairs: Optional[PathLike], output: PathLike, model: str = "",
                   resume: bool = False, overrides: Sequence[str] = (), keys: Sequence[PathLike] = ()) -> Path:
    """What `python -m training.pretrain` and `training.finetune` do: read the config with
    spaCy-style dotted overrides (`--training.max_steps 2`), then train."""
    parsed = parse_overrides(overrides)
    if model:
        from spacy_sapbert.assets import resolve_model

        parsed["model.name_or_path"] = resolve_model(model)
    config = TrainConfig.from_disk(config_path, overrides=parsed)
    try:
        return Trainer(config, pairs, output, keys=keys).train(resume=resume)
    finally:
        # Left to interpreter exit, gloo's threads can abort a finished rank ("terminate
        # called without an active exception"), failing a run that trained to the end.
        if dist.is_initialized():
            dist.destroy_process_group()


def make_train_app(default_config: str, what: str):
    """A typer app whose one command trains with `default_config` unless told otherwise."""
    import typer

    app = typer.Typer(add_completion=False, help=what)

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, help=what)
    def train_command(
        ctx: typer.Context,
        output: Path = typer.Option(..., help="Run directory: checkpoints/, metrics.jsonl, model/"),
        config: Path = typer.Option(Path(default_config), help="Training config (.cfg)"),
        pairs: Optional[Path] = typer.Option(None, help="`cui||name1||name2` pairs file (gzip if .gz), for pair losses"),
        keys: str = typer.Option("", help="Comma-separated key-set folders (python -m training.keys), for loss synonym_marginal"),
        model: str = typer.Option("", help="Model directory or name to start from ('base' = all-MiniLM-L6-v2, 'default' = the bundled model); overrides [model] name_or_path"),
        resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output"),
    ) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            final = train_from_cli(config, pairs, output, model, resume, ctx.args,
                                   keys=[k for k in keys.split(",") if k])
        except (TrainingConfigError, FileNotFoundError, ValueError) as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(1)
        if not Distributed.from_env().is_main:
            return
        if final.parent.parent.name == CHECKPOINT_DIR:
            typer.echo(f"Stopped at [training] max_minutes; the latest checkpoint's model is {final}; --resume continues.")
        else:
            typer.echo(f"Model written to {final}")

    return app
