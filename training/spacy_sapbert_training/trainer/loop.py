"""One training loop for self-alignment pretraining and fine-tuning.

Two kinds of data feed it, each with its objective. Pairs of synonyms (`cui||name1||name2`,
PairBatches) are read in seeded, epoch-wise shuffled batches; both names are embedded,
labelled with their concept, and fed to an in-batch metric loss (SapBERT's, for large batches
on a GPU). Queries against frozen keys (QueryBatches over spacy_sapbert_training.data.keys key sets) are embedded
and scored against a whole dictionary (BioSyn's synonym-marginal likelihood: the CPU recipe);
the model then answers to the keys' model fingerprint, so the index built by that model serves
it. The loop runs on one CPU, one GPU, or several processes under `torchrun` (DDP; NCCL on
GPUs, gloo on CPUs). It checkpoints model, optimizer, scheduler, scaler, every RNG and the step
every `save_every` steps; the data position follows from the step, so `resume` continues
exactly where a killed run stopped and ends with the same weights as an uninterrupted run.

The recipe is read in spacy_sapbert_training.trainer.config; the loss, the batch source and the
model wrappers it names are registered functions (spacy_sapbert_training.trainer.registry:
objective, batches, wrappers), so the loop never asks which method it runs; checkpoints are
written and checked in spacy_sapbert_training.trainer.checkpoint. Here are the Trainer and the commands.
"""
import json
import logging
import os
import platform
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from spacy_sapbert.encoders.transformer import load_transformer, pool, resolve_device
from spacy_sapbert.encoders.base import detect_pooling
from spacy_sapbert.encoders.settings import read_settings
from spacy_sapbert.kb.concepts import PathLike

from .batches import Batches, TrainingData, batch_source
from .checkpoint import (
    CHECKPOINT_DIR,
    METRICS_FILE,
    check_resumable,
    intact_checkpoint,
    latest_checkpoint,
    rng_state,
    save_model,
    set_rng_state,
    trim_metrics,
    write_checkpoint,
)
from .config import TrainConfig, TrainingConfigError, parse_overrides
from .objective import resolve_loss
from .wrappers import load_wrapped, wrappers_for

logger = logging.getLogger(__name__)

# The section of a model's settings (sapbert.json) that holds its training record.
RUN_SECTION = "training"


class PairEncoder(torch.nn.Module):
    """A Hugging Face encoder with [CLS] or mean pooling: the part of the model that trains.

    It pools with spacy_sapbert.encoders.transformer.pool, as the runtime Encoder does, so a saved model
    links as it trained.
    """

    def __init__(self, model: torch.nn.Module, pooling: str, freeze: Sequence[str] = (),
                 markers: Optional[Tuple[int, int]] = None):
        super().__init__()
        self.model = model
        self.pooling = pooling
        self.markers = markers  # the [Ms] and [Me] ids, for "mention" pooling
        # The model's own pooler (BERT's tanh head) never sees a gradient: freezing it keeps
        # AdamW from decaying it for nothing and DDP from waiting for gradients that never come.
        frozen = ("pooler.", *freeze)
        for name, param in model.named_parameters():
            if name.startswith(frozen):
                param.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        return pool(hidden, attention_mask, self.pooling, input_ids, self.markers)


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def keep_layers(model: torch.nn.Module, layers: Sequence[int]) -> torch.nn.Module:
    """`model` (a BERT-like encoder) with only the transformer `layers` it names, in order."""
    n = len(model.encoder.layer)
    wrong = [i for i in layers if not 0 <= i < n]
    if wrong:
        raise TrainingConfigError(f"[model] layers {wrong} do not exist: the model has layers 0 to {n - 1}.")
    model.encoder.layer = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
    model.config.num_hidden_layers = len(layers)
    return model



@dataclass
class _Run:
    """What one call of Trainer.train works with: built once, then stepped to max_steps."""

    device: torch.device
    encoder: PairEncoder
    tokenizer: object
    batches: Batches
    objective: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    amp_dtype: Optional[torch.dtype]
    max_steps: int
    step: int = 0
    model: Optional[torch.nn.Module] = None  # the encoder as it runs: compiled, under DDP


class Trainer:
    """Trains a PairEncoder with the parts its config names in the registries (registry.py):
    the loss ([objective] loss), the batch source it reads (that loss's own, or [objective]
    batch_source) and the model wrappers ([model] adapter and pooling). Synonym pairs feed a
    SelfAlignmentObjective; queries against frozen key sets feed the SynonymMarginalLoss.

    config: the recipe. pairs_path: a `cui||name1||name2` file (gzip if it ends in .gz), for
        pair losses. keys: key-set folders (spacy_sapbert_training.data.keys), for "synonym_marginal".
    output: the run directory; it gets checkpoints/, metrics.jsonl, training.json and model/.
    step_callback: called as callback(step, loss) after every optimizer step (tests use it).
    """

    def __init__(self, config: TrainConfig, pairs_path: Optional[PathLike], output: PathLike,
                 step_callback: Optional[Callable[[int, float], None]] = None, keys: Sequence[PathLike] = (),
                 texts: Optional[PathLike] = None):
        self.config = config
        self.pairs_path = Path(pairs_path) if pairs_path else None
        self.texts_path = Path(texts) if texts else None
        self.keys = [key_source(k) for k in keys]
        self.output = Path(output)
        self.step_callback = step_callback
        self.dist = Distributed.from_env()
        self.teacher: Optional[dict] = None
        self.pooling = config.model.pooling  # resolved ("auto": the model's own) when the encoder loads
        if not config.model.name_or_path:
            raise TrainingConfigError("[model] name_or_path is empty; give the base model with --model.")
        # Unknown names and missing data are refused here, before a model loads.
        data = TrainingData(self.pairs_path, self.keys, self.dist.rank, self.dist.world_size, self.texts_path)
        self.make_loss = resolve_loss(config.objective)  # the one lookup of the run's loss
        self.load_batches = batch_source(config, data, self.make_loss)
        self.batches: Optional[Batches] = None
        wrappers_for(config.model, config.model.pooling)

    # -- the run -------------------------------------------------------------------------
    def train(self, resume: bool = False) -> Path:
        """Run to max_steps (continuing from the latest checkpoint when `resume`); return the
        directory of the final model."""
        device = self._device()
        self._init_distributed(device)
        checkpoint, state = intact_checkpoint(self.output) if resume else (None, None)
        seed_everything(self.config.training.seed + self.dist.rank)
        run = self._prepare(checkpoint, device)
        self.elapsed_before = 0.0
        if checkpoint is not None:
            self._restore(run, checkpoint, state)
        if self.dist.is_main:
            self.output.mkdir(parents=True, exist_ok=True)
            trim_metrics(self.output, run.step)
        run.model = self._wrap(run.encoder, device)
        if run.batches.refresh_every:  # keys as the model of this step embeds them; exact on resume when save_every is a multiple
            self._refresh(run)
        return self._loop(run)

    def _loop(self, run: _Run) -> Path:
        """Step from run.step to max_steps, logging and checkpointing on the way; stop early, at
        a checkpoint, once max_minutes is spent."""
        cfg = self.config.training
        start = time.perf_counter()
        start_step = run.step
        self.stopped_early = False
        progress = tqdm(total=run.max_steps, initial=run.step, desc="training", unit="step", disable=not self.dist.is_main)
        while run.step < run.max_steps:
            mean_loss, found = self._optimizer_step(run)
            step = run.step
            progress.update(1)
            progress.set_postfix(loss=f"{mean_loss:.4f}")
            elapsed = time.perf_counter() - start
            out_of_time = step < run.max_steps and self._out_of_time(elapsed, run.device)
            if self.dist.is_main and (step % cfg.log_every == 0 or step == run.max_steps or out_of_time):
                self._log({
                    "step": step, "loss": round(mean_loss, 6), run.objective.metric_name: found,
                    "lr": run.scheduler.get_last_lr()[0],
                    "steps_per_s": round((step - start_step) / elapsed, 4) if elapsed else None,
                    "elapsed_s": round(self.elapsed_before + elapsed, 2),
                })
            if step % cfg.save_every == 0 or step == run.max_steps or out_of_time:
                self._checkpoint(run, self.elapsed_before + elapsed)
            if self.step_callback is not None:
                self.step_callback(step, mean_loss)
            if out_of_time:
                progress.close()
                self.stopped_early = True
                logger.info("Stopped after %.1f min at step %d of %d; --resume continues.", elapsed / 60, step, run.max_steps)
                return latest_checkpoint(self.output) / "model"
        progress.close()
        return self._finish(run, self.elapsed_before + time.perf_counter() - start)

    def _optimizer_step(self, run: _Run) -> Tuple[float, int]:
        """One optimizer step over grad_accum micro-batches; RETURNS their mean loss and what the
        objective found in them (triplets, or keys scored)."""
        accum = self.config.training.grad_accum
        losses, found = [], 0
        for j in range(accum):
            loss, n = self._micro_step(run, run.step * accum + j, sync=j == accum - 1)
            losses.append(loss)
            found += n
        run.scaler.step(run.optimizer)
        run.scaler.update()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        run.step += 1
        every = run.batches.refresh_every
        if every and run.step % every == 0 and run.step < run.max_steps:
            self._refresh(run)
        return sum(losses) / len(losses), found

    def _micro_step(self, run: _Run, index: int, sync: bool) -> Tuple[float, int]:
        """Forward and backward on micro-batch `index`; under DDP the gradients are averaged
        only when `sync` (the step's last micro-batch)."""
        names, labels = run.batches[index]
        tokens = run.tokenizer(names, padding=True, truncation=True, max_length=self.config.model.max_length,
                               return_tensors="pt").to(run.device)
        labels = labels.to(run.device)
        sync_context = nullcontext() if sync or self.dist.world_size == 1 else run.model.no_sync()
        with sync_context:
            with torch.autocast(run.device.type, dtype=run.amp_dtype, enabled=run.amp_dtype is not None):
                embeddings = run.model(tokens["input_ids"], tokens["attention_mask"])
            loss, n_found = run.objective(embeddings, labels)
            run.scaler.scale(loss / self.config.training.grad_accum).backward()
        return float(loss.detach()), n_found

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

    def _prepare(self, checkpoint: Optional[Path], device: torch.device) -> _Run:
        """The encoder (from the checkpoint's model, else the base model), data, objective and
        optimisation of a run, at step 0."""
        cfg, run = self.config, self.config.training
        source = checkpoint / "model" if checkpoint else cfg.model.name_or_path
        encoder, tokenizer = self._encoder(source, device, fresh=checkpoint is None)
        batches = self.load_batches(source)
        objective = batches.objective(self.make_loss, cfg.objective)
        objective.to(device)
        self.batches, self.objective, self.teacher = batches, objective, batches.teacher
        max_steps = run.max_steps or max(1, run.epochs * batches.per_epoch // run.grad_accum)
        optimizer = torch.optim.AdamW(self._param_groups(encoder, objective), lr=run.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(run.warmup_steps, run.schedule, max_steps))
        amp_dtype, needs_scaler = _amp_settings(run.amp, device)
        return _Run(
            device, encoder, tokenizer, batches, objective, optimizer, scheduler,
            scaler=torch.amp.GradScaler("cuda", enabled=needs_scaler), amp_dtype=amp_dtype, max_steps=max_steps,
        )

    def _load_model(self, source: PathLike):
        try:
            # float32 master weights even from an fp16 package: AdamW steps on fp16 weights round away.
            tokenizer, model = load_transformer(source)
        except OSError as err:
            raise TrainingConfigError(
                f"Could not load the model {str(source)!r} ({str(err).splitlines()[0]}); give a local model directory."
            ) from None
        return tokenizer, model

    def _encoder(self, source: PathLike, device: torch.device, fresh: bool) -> Tuple[PairEncoder, object]:
        """The PairEncoder to train, in training mode on `device`, and its tokenizer; a fresh run
        keeps only the [model] layers (a checkpoint's model has only those already), and the model
        wrappers its [model] section names change it (spacy_sapbert_training.trainer.wrappers)."""
        cfg = self.config.model
        pooling = cfg.pooling
        if pooling == "auto":
            pooling = detect_pooling(Path(cfg.name_or_path).expanduser())
        self.pooling = pooling
        wrappers = wrappers_for(cfg, pooling)
        tokenizer, model = self._load_model(source) if fresh else load_wrapped(wrappers, source, self._load_model)
        if cfg.layers and fresh:
            model = keep_layers(model, cfg.layers)
        for wrapper in wrappers:
            model = wrapper.wrap(model, tokenizer, fresh)
        model.train()
        markers = next((wrapper.markers for wrapper in wrappers if wrapper.markers), None)
        return PairEncoder(model, pooling, cfg.freeze, markers).to(device), tokenizer

    def _param_groups(self, encoder: PairEncoder, objective: torch.nn.Module) -> List[dict]:
        """AdamW's parameter groups: weight decay on all but biases and norms, and the hybrid's
        learned sparse weight (if any) at its own rate."""
        no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
        trainable = [(n, p) for n, p in encoder.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for n, p in trainable if not n.endswith(no_decay)], "weight_decay": self.config.training.weight_decay},
            {"params": [p for n, p in trainable if n.endswith(no_decay)], "weight_decay": 0.0},
        ]
        learned = [p for p in objective.parameters() if p.requires_grad]  # the hybrid's sparse weight
        if learned:
            groups.append({"params": learned, "weight_decay": 0.0, "lr": self.config.objective.sparse.lr})
        return groups

    def _restore(self, run: _Run, checkpoint: Path, state: dict) -> None:
        """Continue `run` from a checkpoint, once its settings and data match this run's: the
        optimizer, scheduler, scaler, objective and RNG states, the step and the time spent."""
        check_resumable(state, self.config, run.max_steps, self._data_identity)
        if state["world_size"] != self.dist.world_size:
            raise TrainingConfigError(
                f"{checkpoint} was written by {state['world_size']} processes, not {self.dist.world_size}; "
                "resume with the same number of processes."
            )
        run.optimizer.load_state_dict(state["optimizer"])
        run.objective.load_state_dict(state.get("objective", {}), strict=False)
        run.scheduler.load_state_dict(state["scheduler"])
        run.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"][self.dist.rank])
        run.step = state["step"]
        self.elapsed_before = state.get("elapsed", 0.0)
        logger.info("Resuming from %s (step %d).", checkpoint, run.step)

    def _wrap(self, encoder: PairEncoder, device: torch.device) -> torch.nn.Module:
        """The encoder as it runs: compiled if [training] compile, under DDP in several processes."""
        model: torch.nn.Module = encoder
        if self.config.training.compile:
            model = torch.compile(model)
        if self.dist.world_size > 1:
            ids = [device.index] if device.type == "cuda" else None
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        return model

    @torch.no_grad()
    def _embed(self, run: _Run, names: Sequence[str]) -> torch.Tensor:
        """Unit vectors of `names` from the model as it is now, in eval mode."""
        from spacy_sapbert.encoders.base import length_sorted_batches

        encoder, device = run.encoder, run.device
        was_training = encoder.training
        encoder.eval()
        vectors = torch.zeros(len(names), encoder.model.config.hidden_size, device=device)
        for rows, texts in length_sorted_batches(names, 256):
            tokens = run.tokenizer(texts, padding=True, truncation=True, max_length=self.config.model.max_length,
                                   return_tensors="pt").to(device)
            vectors[torch.as_tensor(rows, device=device)] = torch.nn.functional.normalize(
                encoder(tokens["input_ids"], tokens["attention_mask"]).float(), dim=-1)
        encoder.train(was_training)
        return vectors

    def _refresh(self, run: _Run) -> None:
        """Re-embed with the model as it is now what the batches mine from or the objective
        scores against: every key set's names (symmetric training), or the names the prototype
        batches mine their hard negatives from."""
        run.batches.reembed(lambda names: self._embed(run, names), run.objective)

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

    def _data_identity(self) -> dict:
        """What the run trains on, as a resumed run must find it again."""
        return self.batches.identity()

    def _checkpoint(self, run: _Run, elapsed: float) -> None:
        """Checkpoint the run at its step (every process's RNG state, gathered to rank 0)."""
        rng = [rng_state()]
        if self.dist.world_size > 1:
            rng = [None] * self.dist.world_size
            dist.all_gather_object(rng, rng_state())
        if self.dist.is_main:
            state = {
                "step": run.step, "optimizer": run.optimizer.state_dict(), "scheduler": run.scheduler.state_dict(),
                "objective": run.objective.state_dict(),
                "scaler": run.scaler.state_dict(), "rng": rng, "world_size": self.dist.world_size,
                "elapsed": elapsed, "config": self.config.to_dict(), "data": self._data_identity(),
            }
            write_checkpoint(self.output, run.encoder, run.tokenizer, state, self._records(),
                             keep=self.config.training.keep_checkpoints)
        if self.dist.world_size > 1:
            dist.barrier()

    def _records(self) -> Dict[str, dict]:
        """What a saved model records beside its weights, as sections of its settings
        (sapbert.json): the keys' model it answers to ("teacher"), its context mode ("context"),
        the hybrid's learned sparse weight ("sparse") and the synonym-marginal tau the pipe ranks
        concepts by ("marginal")."""
        records = {"teacher": self.teacher} if self.teacher else {}
        if self.pooling == "mention":
            records["context"] = {"window": self.config.model.window, "max_length": self.config.model.max_length}
        settings = getattr(self.objective, "settings", None)  # what the loss records for the pipe, if anything
        if settings is not None:
            records.update(settings(learned_sparse=self.config.objective.sparse.weight > 0))
        return records

    def _finish(self, run: _Run, wall: float) -> Path:
        """Write the final model (rank 0) and RETURN its directory once every process is done."""
        final = self.output / "model"
        if self.dist.is_main:
            self._write_final(run, final, wall)
        if self.dist.world_size > 1:
            dist.barrier()
        return final

    def _write_final(self, run: _Run, final: Path, wall: float) -> None:
        """The final model with its training record (its settings' RUN_SECTION)."""
        device, batches = run.device, run.batches
        hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
        data, per_batch = batches.source_record(), batches.names_per_batch
        record = {
            "base_model": self.config.model.name_or_path,
            **data,
            **batches.record(),
            "steps": run.step,
            "names_per_step": per_batch * self.config.training.grad_accum,
            "wall_seconds": round(wall, 1),
            "hardware": f"{self.dist.world_size} × {hardware} ({device.type})",
            "torch": torch.__version__,
            "config": self.config.to_dict(),
        }
        earlier = read_settings(self.config.model.name_or_path).get(RUN_SECTION)
        if earlier is not None:  # the run that made the starting model (pretraining, for a fine-tuned one)
            record["started_from"] = earlier
        save_model(run.encoder, run.tokenizer, final, records={**self._records(), RUN_SECTION: record})
        logger.info("Saved the trained model to %s after %d steps (%.0f s).", final, run.step, wall)


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


def train_from_cli(config_path: PathLike, pairs: Optional[PathLike], output: PathLike, model: str = "",
                   resume: bool = False, overrides: Sequence[str] = (), keys: Sequence[PathLike] = (),
                   texts: Optional[PathLike] = None) -> Path:
    """What `python -m spacy_sapbert_training.trainer.pretrain` and `spacy_sapbert_training.trainer.finetune` do: read the config with
    spaCy-style dotted overrides (`--training.max_steps 2`), then train."""
    parsed = parse_overrides(overrides)
    if model:
        from spacy_sapbert.encoders.models import resolve_model

        parsed["model.name_or_path"] = resolve_model(model)
    config = TrainConfig.from_disk(config_path, overrides=parsed)
    try:
        return Trainer(config, pairs, output, keys=keys, texts=texts).train(resume=resume)
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
        keys: str = typer.Option("", help="Comma-separated key-set folders (python -m spacy_sapbert_training.data.keys), for loss synonym_marginal"),
        texts: Optional[Path] = typer.Option(None, help="Texts file (python -m spacy_sapbert_training.data.texts), for loss distill"),
        model: str = typer.Option("", help="Model directory or name to start from ('base' = all-MiniLM-L6-v2, 'default' = the bundled model); overrides [model] name_or_path"),
        resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output"),
    ) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            final = train_from_cli(config, pairs, output, model, resume, ctx.args,
                                   keys=[k for k in keys.split(",") if k], texts=texts)
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
