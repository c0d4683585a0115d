"""Embed names and mentions with a Hugging Face encoder ([CLS] or mean pooling)."""
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from .base import (
    DEVICES,
    MAX_LENGTH,
    MENTION_END,
    MENTION_START,
    POOLINGS,
    EncoderError,
    context_max_length,
    detect_pooling,
    length_sorted_batches,
    recorded_context,
)
from .settings import read_settings, write_settings

logger = logging.getLogger(__name__)

# The "base" section of a model that stores only what training changed: the model its other
# weights come from (its word embeddings, say, which training kept frozen) and their sha256.
# peft's record of an adapter trained alone (spacy_sapbert_training.trainer.adapters): loaded onto its base and merged.
ADAPTER_FILE = "adapter_config.json"


def tensors_sha256(tensors: dict) -> str:
    """sha256 of named tensors' names and float32 bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def load_transformer(source: Union[str, Path]):
    """The tokenizer and the fp32 model of a directory or Hugging Face name.

    A directory whose settings have a "base" section holds only the weights its training
    changed: the others are taken from the base model it names (checked against their recorded
    sha256), so a fine-tuned model whose word embeddings stayed frozen ships at half the size.
    """
    from transformers import AutoConfig

    source = str(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if (Path(source).expanduser() / ADAPTER_FILE).exists():
        return tokenizer, merged_adapter(source)
    record = read_settings(source).get("base")
    if record is None:
        # fp32 whatever the checkpoint holds (transformers 5 keeps its dtype): a packaged fp16
        # model would otherwise compute in fp16 on a CPU, far slower, and be exported so.
        return tokenizer, AutoModel.from_pretrained(source, dtype=torch.float32)
    from safetensors.torch import load_file

    from .models import resolve_model

    base = resolve_model(record["base"])
    model = AutoModel.from_pretrained(base, config=AutoConfig.from_pretrained(source), dtype=torch.float32)
    state = {}
    for shard in sorted(Path(source).expanduser().glob("*.safetensors")):
        state.update(load_file(shard))
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    from_base = set(record["from_base"])
    kept = {name: tensor for name, tensor in model.state_dict().items() if name in from_base}
    if set(missing) != from_base or unexpected or tensors_sha256(kept) != record["sha256"]:
        raise EncoderError(
            f"{source} stores only the weights its training changed and takes {', '.join(sorted(from_base))} from "
            f"{record['base']!r} ({base}), but that model's weights differ from the ones it was trained with; "
            "install the base it names (make install), or use the full model directory."
        )
    return tokenizer, model


def adapter_base(source: Union[str, Path]) -> Path:
    """The base model directory an adapter directory is loaded onto."""
    from .models import resolve_model

    record = json.loads((Path(source).expanduser() / ADAPTER_FILE).read_text())
    return resolve_model(record.get("base_model_name_or_path") or "base")


def merged_adapter(source: Union[str, Path]) -> torch.nn.Module:
    """An adapter directory's base model with the adapter merged into its weights: one plain
    model, as fast as the base (and exported to int8 as one)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise EncoderError(f"{source} is an adapter (peft); pip install peft==0.21.2 to load it.") from None
    base = adapter_base(source)
    model = AutoModel.from_pretrained(base, dtype=torch.float32)
    return PeftModel.from_pretrained(model, str(source)).merge_and_unload()


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str,
         input_ids: Optional[torch.Tensor] = None, markers: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """One vector per text from the last hidden states: the [CLS] token's ("cls"), the mean
    of the real tokens' ("mean"), or the mean of the tokens between the `markers` ids
    ([Ms], [Me]) in `input_ids` ("mention"; a text without them: the mean of all). Training uses
    it too, so a model links as it was trained."""
    if pooling == "cls":
        return hidden[:, 0]
    weights = attention_mask.to(hidden.dtype)
    if pooling == "mention":
        weights = mention_mask(input_ids, weights, markers)
    mask = weights.unsqueeze(-1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def mention_mask(input_ids: torch.Tensor, attention: torch.Tensor, markers: Tuple[int, int]) -> torch.Tensor:
    """1.0 on the tokens strictly between a row's first start marker and the end marker after
    it; a row with no token there keeps `attention` (every real token). In arithmetic, not
    boolean ops: ONNX Runtime's CPU kernels have no Where over booleans."""
    start = (input_ids == markers[0]).long()
    end = (input_ids == markers[1]).long()
    inside = ((start.cumsum(1) - start) > 0).to(attention.dtype) * (end.cumsum(1) == 0).to(attention.dtype) * attention
    empty = (inside.sum(1, keepdim=True) == 0).to(attention.dtype)
    return inside + empty * attention


def marker_ids(tokenizer) -> Tuple[int, int]:
    """The ids of the mention markers in `tokenizer` (added by training on contexts)."""
    ids = tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END])
    if tokenizer.unk_token_id in ids or None in ids:
        raise EncoderError(f"The tokenizer has no {MENTION_START} and {MENTION_END} tokens, which \"mention\" pooling "
                           "needs; train the model on contexts (spacy_sapbert_training.data.contexts) first, or use mean pooling.")
    return tuple(ids)


def _one_thread_after_fork() -> None:
    torch.set_num_threads(1)


# A forked child (spaCy's `nlp.pipe(n_process=…)`) hangs in its first OpenMP region if the
# parent already ran one; a single intra-op thread never enters one, and the processes
# already give the parallelism.
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_one_thread_after_fork)


def resolve_device(device: str) -> torch.device:
    """Turn "cpu", "cuda", "cuda:1" or "auto" into a torch device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EncoderError(
            f"device={device!r} was asked for but no CUDA GPU is available; use 'cpu' or 'auto'."
        )
    if device != "cpu" and not device.startswith("cuda"):
        raise EncoderError(f"Unknown device {device!r}; use one of {', '.join(DEVICES)}.")
    return torch.device(device)


class TorchEncoder:
    """A Hugging Face encoder that turns texts into L2-normalised vectors.

    model: a local directory or a Hugging Face model name.
    pooling: "cls" ([CLS] token, as SapBERT), "mean" (mean of token vectors, as
        sentence-transformers models such as all-MiniLM-L6-v2 were trained), or "auto": what
        the model directory records (the "pooling" of our `sapbert.json`, or
        sentence-transformers' `1_Pooling/config.json`), else "cls".
    max_length: tokens per text; longer texts are truncated.
    device: "cpu", "cuda" or "auto". On a GPU the weights run in fp16.
    batch_size: texts per forward pass.
    """

    precision = "fp32"

    def __init__(
        self,
        model: Union[str, Path],
        pooling: str = "auto",
        max_length: int = MAX_LENGTH,
        device: str = "cpu",
        batch_size: int = 256,
    ):
        local = Path(model).expanduser()
        if pooling == "auto":
            pooling = detect_pooling(local)
        if pooling not in POOLINGS:
            raise EncoderError(f"Unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}.")
        if max_length < 2:
            raise EncoderError(f"max_length must be at least 2 tokens, not {max_length}.")
        self.name_or_path = str(model)
        self.pooling = pooling
        self.context = recorded_context(local)
        self.max_length = context_max_length(self.context, max_length)
        self.batch_size = batch_size
        self.device = resolve_device(device)
        if local.exists() and not (local / "config.json").exists() and not (local / ADAPTER_FILE).exists():
            raise EncoderError(
                f"{local} has no config.json (nor {ADAPTER_FILE}), so it is not a Hugging Face model directory; "
                "point `model` at the folder that holds config.json and the weights."
            )
        source = str(local) if local.exists() else str(model)
        try:
            self.tokenizer, self.model = load_transformer(source)
        except OSError as err:
            raise EncoderError(
                f"Could not load the encoder {model!r} ({str(err).splitlines()[0]}); give a local "
                "model directory, or a Hugging Face name when the hub is reachable."
            ) from None
        self.model.eval()
        self.markers = marker_ids(self.tokenizer) if pooling == "mention" else None
        self._fingerprint = self._compute_fingerprint()
        # A student (a distilled one, or a query encoder trained against another model's frozen
        # keys) embeds into its teacher's space: it answers to the teacher's
        # fingerprint, so the teacher's index serves it, and indexes are built by the teacher.
        self.teacher: Optional[str] = None  # as the student records it ("default" or a path)
        self.teacher_model: Optional[str] = None  # resolved to a directory
        teacher = read_settings(local).get("teacher")
        if teacher is not None:
            from .models import resolve_model

            self._fingerprint = teacher["fingerprint"]
            self.teacher = teacher["teacher"]
            self.teacher_model = resolve_model(self.teacher)
        if self.device.type == "cuda":
            self.model.half()
        self.model.to(self.device)

    @property
    def dim(self) -> int:
        """The dimension of the vectors."""
        return int(self.model.config.hidden_size)

    @property
    def fingerprint(self) -> str:
        """A hash of the weights, the tokenizer, the pooling and max_length: two encoders with
        the same fingerprint give the same vectors (a student gives its teacher's:
        vectors in the same space)."""
        return self._fingerprint

    def _compute_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
        vocab = sorted(self.tokenizer.get_vocab().items())
        digest.update(repr(vocab).encode())
        digest.update(type(self.tokenizer).__name__.encode())
        digest.update(repr(self.tokenizer("Fingerprint ÄB-12 test")["input_ids"]).encode())
        digest.update(f"pooling={self.pooling};max_length={self.max_length}".encode())
        return digest.hexdigest()[:16]

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], show_progress: Optional[bool] = None) -> np.ndarray:
        """Embed texts; return a float32 array (len(texts), dim) of unit vectors.

        Texts are sorted by length so each batch pads little; the result keeps the input order.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        for rows, texts_in_batch in length_sorted_batches(texts, self.batch_size, show_progress):
            batch = self.tokenizer(
                texts_in_batch,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            vectors = pool(hidden, batch["attention_mask"], self.pooling, batch["input_ids"], self.markers).float()
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
            out[rows] = vectors.cpu().numpy()
        return out

    def save(self, path: Union[str, Path]) -> Path:
        """Write the model and tokenizer to a directory, copying a local model's files as they
        are; return the directory."""
        path = Path(path)
        source = Path(self.name_or_path).expanduser()
        if source.is_dir():
            if source.resolve() != path.resolve():
                shutil.copytree(source, path, dirs_exist_ok=True)
        else:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
        if read_settings(path).get("pooling") != self.pooling:  # a copy that records it keeps its bytes
            write_settings(path, pooling=self.pooling)
        return path

    def __repr__(self) -> str:
        return (
            f"TorchEncoder({self.name_or_path!r}, pooling={self.pooling!r}, "
            f"max_length={self.max_length}, device={str(self.device)!r})"
        )

