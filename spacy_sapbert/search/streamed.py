"""Encoding a knowledge base's names to disk in resumable chunks, for indexes over more names
than fit in memory as float32 (UMLS: ~4M names, 6 GB at 384 dimensions).

The vectors go to WORK_DIR/vectors.npy, a float32 .npy file written and read a chunk at a time
with plain file I/O (DiskVectors; never memory-mapped, so a process's RSS shows what it holds); WORK_DIR/progress.json records each finished chunk with what it was made from (a digest of
the names, the model's fingerprint, the shape and chunk size). A build that was killed resumes
after its last recorded chunk; one for other names or another model starts over. The index is
then trained on a sample and filled chunk by chunk (builders.make_faiss_index), so memory holds
the index's codes and one chunk, never every vector."""
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from ..cache import lines_sha256, replace_file

if TYPE_CHECKING:
    from ..encoders.base import Encoder

logger = logging.getLogger(__name__)

VECTORS_FILE = "vectors.npy"
PROGRESS_FILE = "progress.json"
CHUNK_SIZE = 65_536


def _resumable(work_dir: Path, wanted: dict) -> int:
    """Chunks already done by an earlier build of the same vectors in `work_dir` (0: none)."""
    try:
        progress = json.loads((work_dir / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    if not isinstance(progress, dict) or any(progress.get(key) != value for key, value in wanted.items()):
        logger.warning("%s holds the vectors of another build (other names, model or chunk size); starting over.",
                       work_dir)
        return 0
    if not (work_dir / VECTORS_FILE).exists():
        return 0
    done = progress.get("chunks_done", 0)
    return done if isinstance(done, int) and done >= 0 else 0


class DiskVectors:
    """A 2-d float32 .npy file read in rows (np.fromfile at offsets), never mapped: len, shape,
    a slice of rows, an array of row numbers (read in one ordered pass), and np.asarray."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with self.path.open("rb") as handle:
            major, _ = np.lib.format.read_magic(handle)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(handle)
            self.offset = handle.tell()
        if len(shape) != 2 or fortran or dtype != np.float32:
            raise ValueError(f"{path}: expected a 2-d float32 array in C order, found {shape} {dtype}.")
        self.shape = shape
        self.dtype = dtype
        self.row_bytes = shape[1] * 4

    def __len__(self) -> int:
        return self.shape[0]

    def _rows(self, start: int, stop: int) -> np.ndarray:
        with self.path.open("rb") as handle:
            handle.seek(self.offset + start * self.row_bytes)
            block = np.fromfile(handle, dtype=np.float32, count=(stop - start) * self.shape[1])
        return block.reshape(stop - start, self.shape[1])

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise IndexError("DiskVectors reads contiguous rows only.")
            return self._rows(start, max(start, stop))
        rows = np.asarray(key, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        for start in range(0, len(self), CHUNK_SIZE):
            stop = min(len(self), start + CHUNK_SIZE)
            wanted = order[(rows[order] >= start) & (rows[order] < stop)]
            if len(wanted):
                out[wanted] = self._rows(start, stop)[rows[wanted] - start]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self._rows(0, len(self))
        return whole if dtype is None else whole.astype(dtype)


def _new_vector_file(path: Path, shape: tuple) -> None:
    """A .npy file of `shape` float32 zeros, its data written later in place."""
    with path.open("wb") as handle:
        np.lib.format.write_array_header_2_0(handle, {"descr": "<f4", "fortran_order": False, "shape": shape})
        handle.truncate(handle.tell() + shape[0] * shape[1] * 4)


def encode_to_disk(names: Sequence[str], encoder: "Encoder", work_dir: Path, chunk_size: int = CHUNK_SIZE,
                   show_progress: Optional[bool] = None) -> DiskVectors:
    """The vectors of `names` (len(names) × encoder.dim), encoded `chunk_size` names at a time
    into `work_dir` (see the module docstring)."""
    from tqdm.auto import tqdm

    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {chunk_size}.")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    wanted = {"names_sha256": lines_sha256(names), "model_fingerprint": encoder.fingerprint,
              "n_names": len(names), "dim": encoder.dim, "chunk_size": chunk_size}
    done = _resumable(work_dir, wanted)
    path = work_dir / VECTORS_FILE
    if done:
        logger.info("Resuming %s after %d of %d names.", path, min(done * chunk_size, len(names)), len(names))
    else:
        _new_vector_file(path, (len(names), encoder.dim))
    offset = DiskVectors(path).offset
    n_chunks = -(-len(names) // chunk_size)
    bar = tqdm(total=len(names), initial=min(done * chunk_size, len(names)), desc="encoding names", unit="name",
               disable=not (show_progress if show_progress is not None else len(names) >= 10_000))
    try:
        with path.open("r+b") as handle:
            for chunk in range(done, n_chunks):
                start = chunk * chunk_size
                block = names[start:start + chunk_size]
                handle.seek(offset + start * encoder.dim * 4)
                handle.write(np.ascontiguousarray(encoder.encode(block, show_progress=False), dtype="<f4").tobytes())
                handle.flush()
                os.fsync(handle.fileno())
                progress = json.dumps({**wanted, "chunks_done": chunk + 1}, indent=1)
                replace_file(work_dir / PROGRESS_FILE, lambda path: path.write_text(progress, encoding="utf-8"))
                bar.update(len(block))
    finally:
        bar.close()
    return DiskVectors(path)
