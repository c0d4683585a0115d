"""What every encoder is (the `Encoder` protocol) and what the torch and ONNX backends share:
pooling, what a model directory records (its settings, read in .settings), length-sorted batches.

Nothing here imports torch: a pipe that links with the int8 ONNX encoder never loads it.
"""
import json
from pathlib import Path
from typing import Iterator, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np

from .settings import read_settings

# "mention": the mean of the tokens between the MENTION_START and MENTION_END markers of a
# mention in its context, or of every token of a text without them (a name): CL+KGE's
# contextual mentions (a model's "context" setting).
POOLINGS = ("cls", "mean", "mention")
MENTION_START, MENTION_END = "[Ms]", "[Me]"

# What a model directory records lives in its settings file (settings.SETTINGS_FILE,
# sapbert.json), one section each: "pooling" (how it was trained, so that `pooling="auto"`
# knows); "teacher" (the model whose vector space a student, or a query encoder trained against
# a model's frozen keys, embeds into); "context" (for a model trained on mentions in their
# context, "mention" pooling: {"window": tokens of the mention's sentence in all, "max_length":
# wordpieces the windows were trained with}); "sparse" (the weight of the hybrid score's char
# n-gram tf-idf term: score = dense cosine + sparse_weight × tf-idf cosine); "marginal" (the
# synonym-marginal likelihood's temperature, {"tau": …}, by which the pipe ranks concepts).

# Encodes shorter than this many texts get no progress bar.
PROGRESS_MIN_TEXTS = 5000

PRECISIONS = ("fp32", "int8")
# Where an encoder runs (and "cuda:N"); auto: the GPU where there is one, else the CPU.
DEVICES = ("cpu", "cuda", "auto")

# Tokens per mention or name (SapBERT's 25): biomedical names are short.
MAX_LENGTH = 25

# The sections that travel with a model into its package and its ONNX export.
MODEL_RECORDS = ("sparse", "context", "marginal")


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


def model_record(model: Union[str, Path], name: str) -> Optional[dict]:
    """The record `name` a model directory holds (a settings section such as one of
    MODEL_RECORDS), or None."""
    return read_settings(model).get(name)


def recorded_sparse_weight(model: Union[str, Path]) -> float:
    """The hybrid score's sparse weight a model directory records ("sparse"), else 0."""
    record = model_record(model, "sparse")
    return float(record["sparse_weight"]) if record is not None else 0.0


def recorded_marginal_tau(model: Union[str, Path]) -> float:
    """The synonym-marginal temperature a model directory records ("marginal"), else 0: its
    concepts are ranked by their best name."""
    record = model_record(model, "marginal")
    return float(record["tau"]) if record is not None else 0.0


def recorded_context(model: Union[str, Path]) -> Optional[dict]:
    """How a model encodes a mention in its context ("context"), or None: a mention is encoded
    alone."""
    return model_record(model, "context")


def context_max_length(context: Optional[dict], max_length: int) -> int:
    """`max_length`, raised for a contextual model (its recorded_context) to the wordpieces its
    windows trained with: a window truncated to a name's 25 tokens would lose the mention."""
    return max(max_length, int(context["max_length"])) if context else max_length


def mention_of(text: str) -> str:
    """The mention of a text in context (between the markers), or the text itself."""
    start = text.find(MENTION_START)
    end = text.find(MENTION_END, start + 1)
    if start < 0 or end < 0:
        return text
    return text[start + len(MENTION_START) : end].strip()


def context_nlp():
    """What cuts the windows of training contexts and of the harness's mentions: spaCy's blank
    English tokenizer and sentencizer (the pipe takes its documents' own tokens and sentences)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def in_window(doc, start: int, end: int, window: int, mention: Optional[str] = None) -> str:
    """The mention doc[start:end] (or `mention`, its text as linked, an abbreviation expanded
    say) wrapped in the markers, with tokens of its sentence each side (of the whole doc when it
    has no sentence boundaries), `window` tokens in all counting the mention's."""
    low, high = 0, len(doc)
    if doc.has_annotation("SENT_START"):
        sentence = doc[start].sent
        low, high = sentence.start, max(sentence.end, end)
    room = max(0, window - (end - start))
    left = max(low, start - room // 2)
    right = min(high, end + room - (start - left))
    left = max(low, min(left, right - window))
    text = doc[start:end].text if mention is None else mention
    before, after = doc[left:start].text, doc[end:right].text
    return " ".join(part for part in (before, MENTION_START, text, MENTION_END, after) if part)


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
    """The pooling a model directory records ("pooling"; else sentence-transformers'), or "cls"
    (SapBERT's) when it records none."""
    model_dir = Path(model_dir).expanduser()
    ours = read_settings(model_dir).get("pooling")
    if ours is not None:
        return ours
    sentence_transformers = model_dir / "1_Pooling" / "config.json"
    if sentence_transformers.exists():
        config = json.loads(sentence_transformers.read_text())
        if config.get("pooling_mode_mean_tokens"):
            return "mean"
    return "cls"
