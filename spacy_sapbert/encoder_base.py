"""What the torch encoder and the ONNX encoder share, `load_encoder`, which picks one, and the
numpy helpers (file fingerprints, tie order, best concepts) the index, training and dev packs share.

Nothing here imports torch: a pipe that links with the int8 ONNX encoder never loads it.
"""
import hashlib
import json
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

POOLINGS = ("cls", "mean")
# Written beside a trained model so that `pooling="auto"` knows how it was trained.
POOLING_FILE = "sapbert_pooling.json"
# Encodes shorter than this many texts get no progress bar.
PROGRESS_MIN_TEXTS = 5000
PRECISIONS = ("fp32", "int8")
# Written beside a student (a query encoder trained against a model's frozen keys, a distilled
# student): the teacher whose vector space it embeds into.
TEACHER_FILE = "sapbert_teacher.json"
# Written beside a model trained with BioSyn's hybrid score: the weight of its char n-gram
# tf-idf term (score = dense cosine + sparse_weight × tf-idf cosine).
SPARSE_FILE = "sapbert_sparse.json"


def file_sha256(path: Union[str, Path]) -> str:
    """sha256 of a file, read in 1 MB blocks (fingerprints of weights, indexes and pairs)."""
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_records(folder: Path, names: Iterable[str]) -> Dict[str, dict]:
    """{name: {"bytes", "sha256"}} of files in `folder`: what an index's, an export's, a cached
    state's or a checkpoint's record holds, so that damaged_record can tell a damaged file."""
    return {name: {"bytes": (folder / name).stat().st_size, "sha256": file_sha256(folder / name)} for name in names}


def damaged_record(folder: Path, records: Dict[str, dict]) -> Optional[Tuple[Path, str]]:
    """The first file `records` (from file_records) names that is "missing", of another "size"
    or of another "checksum", with which; None when every one matches."""
    for name, expected in records.items():
        file = folder / name
        if not file.exists():
            return file, "missing"
        if not isinstance(expected, dict) or file.stat().st_size != expected.get("bytes"):
            return file, "size"
        if file_sha256(file) != expected.get("sha256"):
            return file, "checksum"
    return None


def tie_order(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The order of one query's hits: best score first, and among scores equal to 6 decimals
    (one name under two concepts) the later row first, as FAISS's flat search mostly leaves
    them. FAISS's own tie order shifts with k; fixing it makes the linker, the harness and the
    dev packs agree. It matters: MEDIC gives some names under both an OMIM and a MeSH id, and
    NCBI dev (standard) scores 89.2 with this order and 86.5 with the earlier row first."""
    # in float64: FAISS pads a short result with -FLT_MAX, which overflows float32 when scaled
    return np.lexsort((-rows, -np.round(np.asarray(scores, dtype=np.float64), 6)))


def best_concepts(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray, k: int) -> List[Tuple[int, float]]:
    """One query's k best distinct concepts from its search hits (row -1: no hit), each scored
    by its best name, ties in tie_order; fewer than k when the hits hold fewer concepts."""
    best: Dict[int, float] = {}
    order = tie_order(scores, rows)
    for score, row in zip(scores[order], rows[order]):
        if row < 0 or len(best) == k:
            break
        best.setdefault(int(row_concepts[row]), float(score))
    return list(best.items())

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


def load_encoder(
    model: Union[str, Path],
    precision: str = "fp32",
    pooling: str = "auto",
    max_length: int = 25,
    device: str = "cpu",
    batch_size: int = 256,
    threads: int = 0,
):
    """The encoder for `model` at `precision`.

    fp32: the model itself with torch (exact; CPU or GPU). int8: an ONNX Runtime export with
    int8 weights (CPU only; exported on first use and cached). A directory that already is an
    ONNX export loads as one, whatever `precision` says. threads: ONNX Runtime's (0: one per
    core); torch keeps its own setting.
    """
    from .onnx_encoder import OnnxEncoder, exported_model, is_onnx_dir

    if precision not in PRECISIONS:
        raise EncoderError(f"Unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    if is_onnx_dir(model) or precision != "fp32":
        if device not in ("cpu", "auto"):  # auto: the CPU, the only device the ONNX path runs on
            raise EncoderError(f"The {precision} ONNX encoder runs on CPU only, not device={device!r}; "
                               "use precision 'fp32' on a GPU.")
        path = exported_model(model, precision, pooling=pooling, max_length=max_length)
        return OnnxEncoder(path, pooling=pooling, max_length=max_length, batch_size=batch_size, threads=threads)
    from .encoder import Encoder

    return Encoder(model, pooling=pooling, max_length=max_length, device=device, batch_size=batch_size)


def exact_encoder(encoder):
    """The fp32 torch model whose vector space `encoder` embeds into: itself, the model an int8
    export came from, or a student's teacher (a query encoder trained against frozen keys is the
    student of the keys' model), followed to the model that has no teacher. Names are embedded
    by it, exactly."""
    from .encoder import Encoder

    meta = getattr(encoder, "meta", None)
    if meta is None:
        while getattr(encoder, "teacher_model", None):
            encoder = Encoder(encoder.teacher_model, pooling=encoder.pooling, max_length=encoder.max_length)
        return encoder
    from .defaults import resolve_model

    source = Path(resolve_model(meta["exact_model"]))
    if not (source / "config.json").exists():
        raise EncoderError(f"{encoder.name_or_path} was exported from {source}, which is gone, and building "
                           "an index needs that exact model; point `model` at it, or export again.")
    exact = exact_encoder(Encoder(source, pooling=encoder.pooling, max_length=encoder.max_length))
    if exact.fingerprint != encoder.fingerprint:
        raise EncoderError(f"{source} has changed since {encoder.name_or_path} was exported from it; "
                           "export it again.")
    return exact
