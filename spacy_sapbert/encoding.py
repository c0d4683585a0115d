"""What every encoder is (the `Encoder` protocol) and what the torch and ONNX backends share:
pooling, the files a model directory records, length-sorted batches.

Nothing here imports torch: a pipe that links with the int8 ONNX encoder never loads it.
"""
import json
from pathlib import Path
from typing import Iterator, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np

POOLINGS = ("cls", "mean")

# Written beside a trained model so that `pooling="auto"` knows how it was trained.
POOLING_FILE = "sapbert_pooling.json"

# Encodes shorter than this many texts get no progress bar.
PROGRESS_MIN_TEXTS = 5000

PRECISIONS = ("fp32", "int8")

# Tokens per mention or name (SapBERT's 25): biomedical names are short.
MAX_LENGTH = 25

# Written beside a student (a query encoder trained against a model's frozen keys, a distilled
# student): the teacher whose vector space it embeds into.
TEACHER_FILE = "sapbert_teacher.json"

# Written beside a model trained with BioSyn's hybrid score: the weight of its char n-gram
# tf-idf term (score = dense cosine + sparse_weight × tf-idf cosine).
SPARSE_FILE = "sapbert_sparse.json"


@runtime_checkable
class Encoder(Protocol):
    """An encoder of names and mentions (`encoder.TorchEncoder`, `onnx_encoder.OnnxEncoder`).

    fingerprint: the vector space it embeds into; an index answers to it (a student, a query
    encoder trained against frozen keys or an int8 export answers to its teacher's).
    dim, pooling, max_length: its vectors' size and how they are made.
    """

    fingerprint: str
    dim: int
    pooling: str
    max_length: int

    def encode(self, texts: Sequence[str], batch_size: Optional[int] = None,
               show_progress: Optional[bool] = None) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""

    def save(self, path: Union[str, Path]) -> None:
        """Write what loads this encoder again."""


def recorded_sparse_weight(model: Union[str, Path]) -> float:
    """The hybrid score's sparse weight a model directory records (SPARSE_FILE), else 0."""
    record = Path(model).expanduser() / SPARSE_FILE
    return float(json.loads(record.read_text())["sparse_weight"]) if record.exists() else 0.0


class EncoderError(ValueError):
    """The encoder cannot be loaded or configured as asked."""


def length_sorted_batches(
    texts: Sequence[str], batch_size: int, show_progress: Optional[bool] = None
) -> Iterator[Tuple[np.ndarray, List[str]]]:
    """(rows, texts) batches of texts of similar length, longest first, so each batch pads
    little; an empty text is given as " ". A progress bar shows from PROGRESS_MIN_TEXTS texts."""
    from tqdm.auto import tqdm

    order = np.argsort([-len(t) for t in texts], kind="stable")
    if show_progress is None:
        show_progress = len(texts) >= PROGRESS_MIN_TEXTS
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="encoding", unit="batch", disable=not show_progress):
        rows = order[start : start + batch_size]
        yield rows, [texts[i] or " " for i in rows]


def detect_pooling(model_dir: Path) -> str:
    """The pooling a model directory records, or "cls" (SapBERT's) when it records none."""
    ours = model_dir / POOLING_FILE
    if ours.exists():
        return json.loads(ours.read_text())["pooling"]
    sentence_transformers = model_dir / "1_Pooling" / "config.json"
    if sentence_transformers.exists():
        config = json.loads(sentence_transformers.read_text())
        if config.get("pooling_mode_mean_tokens"):
            return "mean"
    return "cls"
