"""Encode mentions with ONNX Runtime and int8 weights: the fast CPU path, without torch.

`export_onnx` turns a model directory into an ONNX graph that does the whole job (encoder,
pooling, L2 normalisation) with its MatMul and embedding weights quantised to int8 per channel
(INT8_OPS), and writes it beside the tokenizer and a `sapbert.json` whose "onnx" section records
how it was made (an export written before sapbert.json has it in `sapbert_onnx.json`, which still
loads). `OnnxEncoder` runs that directory with ONNX Runtime and the `tokenizers` library only, so
a pipeline that links with it never imports torch or transformers.

An int8 encoder stands in for the model it was exported from: it answers to that model's
fingerprint, so the index built with the exact fp32 model serves it. Names are embedded once,
exactly; only mentions take the int8 path.
"""
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Union

import numpy as np
from ..cache import cache_dir, cached_build
from ..cache import damaged_record, file_records, file_sha256
from .backends import torch_encoder_module
from .base import (
    MAX_LENGTH,
    MODEL_RECORDS,
    PRECISIONS,
    PROGRESS_MIN_TEXTS,
    EncoderError,
    context_max_length,
)
from .settings import LEGACY_FILES, SETTINGS_FILE, SettingsError, read_settings, write_settings

logger = logging.getLogger(__name__)

# The file whose "onnx" section records an export (settings.SETTINGS_FILE); an export written
# before it holds that record in ONNX_LEGACY_META.
ONNX_META = SETTINGS_FILE
ONNX_LEGACY_META = LEGACY_FILES["onnx"]
ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
# 2: int8 activations quantised with fixed, calibrated scales (static_activation_scales), so a
# text's vector no longer depends on the other texts of its batch. 1: per-batch scales.
ONNX_FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
# Every CALIBRATION_STEP-th name of the bundled index's KB calibrates the activation scales
# (4,250 names of 212,478).
CALIBRATION_STEP = 50
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


def _export_intact(path: Path) -> bool:
    meta = export_record(path)
    if not isinstance(meta, dict):
        return False
    return meta.get("format_version") == ONNX_FORMAT_VERSION and "files" in meta and damaged_file(path, meta) is None


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
            raise EncoderError(f"{path} records no export (no {ONNX_META} with an \"onnx\" section, nor "
                               f"{ONNX_LEGACY_META}), so it is not an exported ONNX encoder; "
                               "write one with `spacy-sapbert export-onnx`.")
        if meta.get("format_version") not in READABLE_FORMAT_VERSIONS:
            raise EncoderError(f"{path}'s export has format version {meta.get('format_version')!r}, "
                               f"but this spacy-sapbert reads {READABLE_FORMAT_VERSIONS}; export the model again.")
        if meta["format_version"] == 1 and meta.get("precision") == "int8":
            logger.warning("%s was exported by an older spacy-sapbert: its int8 vectors depend on the other "
                           "texts of a batch. Export it again (`spacy-sapbert export-onnx`) for batch-independent links.", path)
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
                str(self.path / self.meta["file"]), options, providers=["CPUExecutionProvider"]
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
        bit for bit. ONNX Runtime's one-row kernels round differently from its many-row ones (61
        of 384 components by 1 ulp), so a lone text runs beside a copy of itself."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        session = self.session()
        encodings = self.tokenizer.encode_batch([t or " " for t in texts])
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        batches = []
        for _, group in itertools.groupby(order, key=lambda row: lengths[row]):
            group = list(group)
            batches += [group[start : start + self.batch_size] for start in range(0, len(group), self.batch_size)]
        from tqdm.auto import tqdm

        if show_progress is None:
            show_progress = len(texts) >= PROGRESS_MIN_TEXTS
        def run(rows: List[int]) -> None:
            run_rows = rows * 2 if len(rows) == 1 else rows
            ids = np.array([encodings[r].ids for r in run_rows], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self.meta["inputs"]:
                feeds["token_type_ids"] = np.array([encodings[r].type_ids for r in run_rows], dtype=np.int64)
            out[rows] = session.run(None, feeds)[0][: len(rows)]

        progress = tqdm(total=len(batches), desc="encoding", unit="batch", disable=not show_progress)
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


def export_onnx(
    model: Union[str, Path],
    output: Union[str, Path],
    pooling: str = "auto",
    max_length: int = MAX_LENGTH,
    precision: str = "int8",
    calibration: Optional[Union[str, Path]] = None,
    source_name: Optional[str] = None,
) -> Path:
    """Export a Hugging Face encoder directory to ONNX (int8 or fp32) in `output`; return it.

    calibration: the index directory (or KB file) whose names set the int8 activation scales,
        the names the model will search (calibration_texts); None: the bundled index's KB.
    source_name: how the export names the model it came from ("default"); its path if None.
    Needs torch, transformers and onnx (the runtime that uses the result needs none of them).
    """
    if precision not in PRECISIONS:
        raise EncoderError(f"Unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    TorchEncoder = torch_encoder_module("exporting a model to ONNX").TorchEncoder

    encoder = TorchEncoder(model, pooling=pooling, max_length=max_length, device="cpu")
    inputs = [n for n in ("input_ids", "attention_mask", "token_type_ids")
              if n in encoder.tokenizer.model_input_names]
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = _export_fp32(encoder, inputs, Path(tmp) / ONNX_FILE)
        if precision == "int8":
            _quantise_weights(fp32, output / ONNX_FILE)
        else:
            shutil.copyfile(fp32, output / ONNX_FILE)
    encoder.tokenizer.save_pretrained(output)
    quantisation = {}
    if precision == "int8":
        # Fixed scales: a mention's vector must not depend on what else is in its batch.
        # Measured on NCBI dev mentions (trained default): mean cosine with fp32 0.993 as with
        # per-batch scales, vectors the same whatever the batch to 5e-8 (per-batch: 0.04).
        quantisation = static_activation_scales(output / ONNX_FILE, output / TOKENIZER_FILE, inputs,
                                                calibration_texts(calibration), encoder.max_length)
    # the hybrid's weight, the context mode, the marginal's tau travel with it
    records = {name: record for name, record in read_settings(model).items() if name in MODEL_RECORDS}
    if not (output / TOKENIZER_FILE).exists():
        raise EncoderError(f"{model} has no fast tokenizer (tokenizer.json), which the ONNX path needs.")
    meta = {
        "format_version": ONNX_FORMAT_VERSION, "file": ONNX_FILE, "precision": precision,
        "pooling": encoder.pooling, "max_length": encoder.max_length, "dim": encoder.dim, "inputs": inputs,
        "pad_id": encoder.tokenizer.pad_token_id, "pad_token": encoder.tokenizer.pad_token,
        "source_model": source_name or encoder.name_or_path, "source_fingerprint": encoder.fingerprint,
        # the fp32 model that embeds names into this space: the model itself, or a student's teacher
        "exact_model": encoder.teacher or encoder.name_or_path,
        **quantisation,
        "files": file_records(output, (ONNX_FILE, TOKENIZER_FILE)),
    }
    write_settings(output, onnx=meta, **records)  # last: it marks the export whole
    return output


def _export_fp32(encoder, inputs: Sequence[str], target: Path) -> Path:
    """The whole job (encoder, pooling, L2 normalisation) as one fp32 ONNX graph at `target`."""
    import torch

    from .transformer import pool

    class Embed(torch.nn.Module):
        def __init__(self, model, pooling, markers):
            super().__init__()
            self.model, self.pooling, self.markers = model, pooling, markers

        def forward(self, *tensors):
            batch = dict(zip(inputs, tensors))
            hidden = self.model(**batch).last_hidden_state
            vectors = pool(hidden, batch["attention_mask"], self.pooling, batch["input_ids"], self.markers)
            return torch.nn.functional.normalize(vectors, dim=-1)

    sample = encoder.tokenizer(["lactic acidosis", "type 2 diabetes mellitus"], padding=True, return_tensors="pt")
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes on ops it rewrote
        torch.onnx.export(
            Embed(encoder.model, encoder.pooling, encoder.markers).eval(), tuple(sample[n] for n in inputs), str(target),
            input_names=list(inputs), output_names=["embeddings"],
            dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in inputs}, "embeddings": {0: "batch"}},
            opset_version=17, dynamo=False,
        )
    return target


def _quantise_weights(fp32: Path, target: Path) -> None:
    """INT8_OPS' weights to int8, per channel: per-tensor int8 (the default) moved MiniLM's
    vectors to a mean cosine of 0.956 with fp32 on NCBI mentions, per channel to 0.991."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level, root.level = root.level, max(root.level, logging.ERROR)  # its "consider pre-processing" note
    try:
        quantize_dynamic(fp32, target, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=list(INT8_OPS), extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.level = level


def calibration_texts(source: Optional[Union[str, Path]] = None) -> list:
    """Names that calibrate int8 activation scales: every CALIBRATION_STEP-th name of the KB of
    `source` (an index directory, or a KB file any `kb.formats.load_kb` format reads), the text
    the model will be asked to match; None: the bundled index's KB (MeSH and MONDO names)."""
    if source is None:
        from ..kb.bundled import default_kb

        kb = default_kb()[0]
    else:
        from ..kb.formats import load_kb

        source = Path(source)
        if source.is_dir():
            source = next(source / name for name in ("kb.jsonl.gz", "kb.jsonl") if (source / name).exists())
        kb = load_kb(source)
    names, _ = kb.name_rows()
    return names[::CALIBRATION_STEP]


def static_activation_scales(onnx_file: Path, tokenizer_file: Path, inputs: Sequence[str],
                             texts: Sequence[str], max_length: int) -> dict:
    """Give a dynamically quantised graph fixed activation scales, in place: each
    DynamicQuantizeLinear (whose uint8 scale and zero point come from the min and max of its
    whole input tensor, so from the other texts of the batch and their padding) becomes a
    QuantizeLinear with the scale and zero point that min and max over `texts`' real tokens give.
    Returns what the export records of it."""
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper
    from tokenizers import Tokenizer

    model = onnx.load(str(onnx_file))
    dynamic = [node for node in model.graph.node if node.op_type == "DynamicQuantizeLinear"]
    probe = onnx.load(str(onnx_file))
    for node in dynamic:
        probe.graph.output.append(helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    low = {node.input[0]: 0.0 for node in dynamic}  # DynamicQuantizeLinear's range always holds 0
    high = dict(low)
    encodings = tokenizer.encode_batch([t or " " for t in texts])
    by_length = {}
    for encoding in encodings:
        by_length.setdefault(len(encoding.ids), []).append(encoding)
    for group in by_length.values():
        for start in range(0, len(group), 64):
            ids = np.array([e.ids for e in group[start : start + 64]], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
            values = session.run([node.input[0] for node in dynamic], {n: feeds[n] for n in inputs})
            for node, value in zip(dynamic, values):
                low[node.input[0]] = min(low[node.input[0]], float(value.min()))
                high[node.input[0]] = max(high[node.input[0]], float(value.max()))
    nodes = []
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        name = node.input[0]
        scale = max(high[name] - low[name], 1e-8) / 255
        zero_point = int(np.clip(round(-low[name] / scale), 0, 255))
        model.graph.initializer.extend([
            numpy_helper.from_array(np.array(scale, dtype=np.float32), node.output[1]),
            numpy_helper.from_array(np.array(zero_point, dtype=np.uint8), node.output[2]),
        ])
        nodes.append(helper.make_node("QuantizeLinear", [name, node.output[1], node.output[2]], [node.output[0]],
                                      name=f"{node.name}_static"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save_model(model, str(onnx_file))
    return {"activation_scales": "static", "calibration_texts": len(texts), "quantised_inputs": len(dynamic)}


def _calibration_digest(source: Path) -> str:
    """What identifies a calibration source's names: its KB file's checksum as an index's
    meta.json records it, else the file's own."""
    meta = source / "meta.json"
    if meta.exists():
        files = json.loads(meta.read_text(encoding="utf-8")).get("files", {})
        recorded = next((files[name] for name in ("kb.jsonl.gz", "kb.jsonl") if name in files), None)
        if recorded:
            return recorded["sha256"]
    return _directory_digest(source) if source.is_dir() else file_sha256(source)


def _directory_digest(path: Path) -> str:
    """A hash of every file's name and bytes under `path` (a model directory)."""

    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file_sha256(file).encode())
    return digest.hexdigest()[:16]


def exported_model(model: Union[str, Path], precision: str, pooling: str = "auto", max_length: int = MAX_LENGTH,
                   calibration: Optional[Union[str, Path]] = None) -> Path:
    """An ONNX export of `model` at `precision`: `model` itself when it is one, else a cached
    export, made on first use (a few seconds for MiniLM), calibrated on the names of
    `calibration` (export_onnx)."""
    local = Path(model).expanduser()
    if is_onnx_dir(local):
        return local
    if not local.is_dir():
        raise EncoderError(f"precision={precision!r} needs a local model directory, and {model!r} is not "
                           "one; download the model, or use precision 'fp32'.")
    recipe = f"{_directory_digest(local)};{pooling};{max_length};{precision};{','.join(INT8_OPS)};{ONNX_FORMAT_VERSION}"
    if calibration is not None and precision == "int8":
        recipe += f";{_calibration_digest(Path(calibration))}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    cached = cache_dir() / f"onnx-{precision}-{key}"
    return cached_build(cached, lambda staging: export_onnx(local, staging, pooling=pooling, max_length=max_length,
                                                            precision=precision, calibration=calibration),
                        _export_intact, f"{precision} ONNX export of {local}", takes="about 10 s for a 6-layer model")
