"""Encode mentions with ONNX Runtime and int8 weights: the fast CPU path, without torch.

`OnnxEncoder` runs a directory written by `encoders.export.export_onnx` (an ONNX graph that does
the whole job: encoder, pooling, L2 normalisation, with int8 MatMul and embedding weights, beside
the tokenizer and a `sapbert.json` whose "onnx" section records how it was made) with ONNX Runtime and the
`tokenizers` library only, so a pipeline that links with it never imports torch or transformers.

An int8 encoder stands in for the model it was exported from: it answers to that model's
fingerprint, so the index built with the exact fp32 model serves it. Names are embedded once,
exactly; only mentions take the int8 path.
"""
import hashlib
import itertools
import logging
import os
import platform
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np

from ..cache import damaged_record, derived_copy, recorded_sha256
from .base import PROGRESS_MIN_TEXTS, EncoderError, context_max_length
from .settings import SETTINGS_FILE, SettingsError, read_settings

logger = logging.getLogger(__name__)

# The file whose "onnx" section records an export (settings.SETTINGS_FILE).
ONNX_META = SETTINGS_FILE


ONNX_FILE = "model.onnx"


TOKENIZER_FILE = "tokenizer.json"


# 3: the pooling's sum over tokens is a batched product ([B, 1, L] @ [B, L, H]), which ONNX Runtime
# computes for each row the same way in any batch, a batch of one included, so a lone text runs
# alone (its ReduceSum took another path for one row: 61 of 384 components 1 ulp off).
# 2: int8 activations quantised with fixed, calibrated scales (static_activation_scales), so a
# text's vector no longer depends on the other texts of its batch. 1: per-batch scales.
ONNX_FORMAT_VERSION = 3
# The versions this runtime reads: a version-2 export runs a lone text beside a copy of itself.
READ_FORMAT_VERSIONS = (2, 3)
# Below this many texts, `encode` tokenizes them one by one instead of in one batch call.
SERIAL_TOKENIZING = 64


# What int8 quantises (per channel): the MatMuls and the embedding tables (Gather). The
# embeddings are two thirds of MiniLM, so this makes the export 23 MB instead of 59 MB, for a
# mean cosine with fp32 of 0.991 on NCBI dev mentions against 0.992 for MatMuls alone.
INT8_OPS = ("MatMul", "Gather")


def export_record(path: Union[str, Path]) -> Optional[dict]:
    """The record of how the export at `path` was made (its "onnx" setting), or None when
    `path` is no export or its settings cannot be read."""
    try:
        return read_settings(path).get("onnx")
    except SettingsError:
        return None


def is_onnx_dir(path: Union[str, Path]) -> bool:
    """Whether `path` is a directory written by `export_onnx` (now or before sapbert.json)."""
    return export_record(path) is not None


def damaged_file(path: Path, meta: dict) -> Optional[str]:
    """Why a file of the export at `path` no longer matches the size and checksum its meta
    records (format 2 records them), or None."""
    damaged = damaged_record(path, meta.get("files", {}))
    if damaged is None:
        return None
    return f"{damaged[0]} does not match the checksum its export records, so it is damaged; export the model again."


def _optimised_graph(path: Path, meta: dict, onnxruntime) -> Path:
    """The graph file a session starts from: the export's own graph as ONNX Runtime optimises it
    at its extended level (fusions that hold on any CPU), written once into the cache, keyed by
    the export's checksum, ONNX Runtime's version and the machine's architecture, so that a
    session starts without making them again (0.046 s against 0.077 for the bundled int8
    default; the same numbers bit for bit, as the session applies the same optimisations either
    way); the export's own file where it records no checksum or no cache can be written."""
    graph = path / meta["file"]
    sha256 = recorded_sha256(meta, meta["file"])
    if sha256 is None:
        return graph

    def read(folder: Path) -> Path:
        return folder / OPTIMISED_FILES[0]

    def write(staging: Path) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(staging / OPTIMISED_FILES[0])
        onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    key = hashlib.sha256(f"{sha256} {onnxruntime.__version__} {platform.machine()}".encode("utf-8")).hexdigest()
    optimised = derived_copy(graph, key, "onnx-optimised", OPTIMISED_VERSION, OPTIMISED_FILES, read, write,
                             "ONNX Runtime's optimised graph")
    return graph if optimised is None else optimised


# What the cache keeps of an export's graph (_optimised_graph).
OPTIMISED_FILES = ("model.onnx",)
OPTIMISED_VERSION = 1


class _NoProgress:
    def update(self) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, show: bool):
    """A progress bar over `total` batches, or one that shows nothing: tqdm.auto is imported only
    to show one (its import, asyncio's with it, took 23 ms of a process's first document)."""
    if not show:
        return _NoProgress()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="encoding", unit="batch")


def _cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class OnnxEncoder:
    """Run a directory written by `export_onnx` with ONNX Runtime on CPU.

    path: the exported directory.
    pooling, max_length: must agree with the export (pooling is part of the graph); "auto" and
        None take the export's own.
    batch_size: texts per forward pass.
    threads: ONNX Runtime calls run side by side, each on one thread; 0: one per CPU this process may use.
    """

    device = "cpu"

    def __init__(
        self,
        path: Union[str, Path],
        pooling: str = "auto",
        max_length: Optional[int] = None,
        batch_size: int = 256,
        threads: int = 0,
    ):
        from tokenizers import Tokenizer

        path = Path(path).expanduser()
        try:
            settings = read_settings(path)
        except SettingsError as err:
            raise EncoderError(f"{err}; export the model again.") from None
        meta = settings.get("onnx")
        if meta is None:
            raise EncoderError(f"{path} records no export (no {ONNX_META} with an \"onnx\" section), so it is not "
                               "an exported ONNX encoder; "
                               "write one with `spacy-sapbert export-onnx`.")
        if meta.get("format_version") not in READ_FORMAT_VERSIONS:
            raise EncoderError(f"{path}'s export has format version {meta.get('format_version')!r}, "
                               f"but this spacy-sapbert reads versions {' and '.join(map(str, READ_FORMAT_VERSIONS))}; "
                               "export the model again.")
        if pooling not in ("auto", meta["pooling"]):
            raise EncoderError(f"{path} was exported with {meta['pooling']} pooling, which is part of its "
                               f"graph, so pooling={pooling!r} cannot apply; export it again to change it.")
        context = settings.get("context")
        if max_length is not None:
            max_length = context_max_length(context, max_length)
        if max_length not in (None, meta["max_length"]):
            raise EncoderError(f"{path} was exported for max_length {meta['max_length']}, not {max_length}; "
                               "export it again with the max_length you want.")
        for name in (meta["file"], TOKENIZER_FILE):
            if not (path / name).exists():
                raise EncoderError(f"{path / name} is missing; copy the whole exported directory or export again.")
        problem = damaged_file(path, meta)
        if problem:
            raise EncoderError(problem)
        self.path = path
        self.meta = meta
        self.name_or_path = str(path)
        self.pooling = meta["pooling"]
        self.context = context
        self.max_length = int(meta["max_length"])
        self.precision = meta["precision"]
        self.batch_size = batch_size
        self.threads = threads
        self._lone_copy = meta["format_version"] < 3  # a one-row batch rounds its pooling otherwise
        self.tokenizer = Tokenizer.from_file(str(path / TOKENIZER_FILE))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # encode batches texts of one token length: nothing to pad
        self._session = None
        self._session_pid = None
        self._pool: Optional[ThreadPoolExecutor] = None  # runs batches side by side (encode)
        self._pool_pid: Optional[int] = None
        self.session()

    @property
    def dim(self) -> int:
        """The dimension of the vectors."""
        return int(self.meta["dim"])

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the model this was exported from (see the module docstring)."""
        return self.meta["source_fingerprint"]

    def session(self):
        """The ONNX Runtime session, made on loading and again in a forked child (a
        session's thread pool does not survive a fork). Each call runs on one thread: one
        document's few-row calls ran a third faster so than on two intra-op threads, and
        `encode` runs an encoding's batches side by side instead (`threads` of them, one in a
        forked child), each call's numbers unchanged."""
        if self._session is None or self._session_pid != os.getpid():
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            self._workers = 1 if self._session_pid is not None else (self.threads or _cpus())
            self._session = onnxruntime.InferenceSession(
                str(_optimised_graph(self.path, self.meta, onnxruntime)), options, providers=["CPUExecutionProvider"]
            )
            self._session_pid = os.getpid()
        return self._session

    def __getstate__(self) -> dict:
        # A session cannot be pickled; the copy makes its own, one-threaded, as a forked child does.
        return dict(self.__dict__, _session=None, _session_pid=-1, _pool=None, _pool_pid=None)

    def encode(self, texts: Sequence[str], show_progress: Optional[bool] = None) -> np.ndarray:
        """Embed texts; return a float32 array (len(texts), dim) of unit vectors, in input order.

        A batch holds texts of one token length, so nothing is padded, and with static
        activation scales (format 2) a text's vector does not depend on its batch's other texts,
        bit for bit. From format 3 a lone text runs alone (a document's texts are mostly of
        different lengths); a format-2 graph's pooling rounds one row differently from many (61
        of 384 components by 1 ulp), so there it runs beside a copy of itself."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        session = self.session()
        texts = [t or " " for t in texts]
        # A few texts (a document's) are tokenized one by one: the batch call's thread pool took
        # 0.5 to 4 ms to wake for five texts that take 0.06 ms alone; the ids are the same.
        encodings = ([self.tokenizer.encode(t) for t in texts] if len(texts) < SERIAL_TOKENIZING
                     else self.tokenizer.encode_batch(texts))
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        batches = []
        for _, group in itertools.groupby(order, key=lambda row: lengths[row]):
            group = list(group)
            batches += [group[start : start + self.batch_size] for start in range(0, len(group), self.batch_size)]
        if show_progress is None:
            show_progress = len(texts) >= PROGRESS_MIN_TEXTS
        def run(rows: List[int]) -> None:
            run_rows = rows * 2 if len(rows) == 1 and self._lone_copy else rows
            ids = np.array([encodings[r].ids for r in run_rows], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self.meta["inputs"]:
                feeds["token_type_ids"] = np.array([encodings[r].type_ids for r in run_rows], dtype=np.int64)
            out[rows] = session.run(None, feeds)[0][: len(rows)]

        progress = _progress(len(batches), show_progress)
        if self._workers > 1 and len(batches) > 1:
            # ONNX Runtime releases the GIL in run(): one-threaded calls side by side.
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool, self._pool_pid = ThreadPoolExecutor(self._workers), os.getpid()
            for _ in self._pool.map(run, batches):
                progress.update()
        else:
            for rows in batches:
                run(rows)
                progress.update()
        progress.close()
        return out

    def save(self, path: Union[str, Path]) -> Path:
        """Copy the exported directory to `path`; return it."""
        path = Path(path)
        if self.path.resolve() != path.resolve():
            shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    def __repr__(self) -> str:
        return f"OnnxEncoder({self.name_or_path!r}, precision={self.precision!r}, pooling={self.pooling!r})"
