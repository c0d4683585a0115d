"""Export a model directory to int8 ONNX for `encoders.onnx.OnnxEncoder`: an ONNX graph that does
the whole job (encoder, pooling, L2 normalisation) with its MatMul and embedding weights quantised
to int8 per channel (INT8_OPS) and activation scales calibrated once on the names the model will
search, written beside the tokenizer and a `sapbert.json` recording how it was made; and the
cached export of a model on first use (`exported_model`). Exporting needs torch (the gpu extra).
"""
import hashlib
import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ..cache import cache_dir, cached_build, file_records, file_sha256
from .backends import torch_encoder_module
from .base import MAX_LENGTH, MODEL_RECORDS, PRECISIONS, EncoderError
from .onnx import INT8_OPS, ONNX_FILE, ONNX_FORMAT_VERSION, TOKENIZER_FILE, damaged_file, export_record, is_onnx_dir
from .settings import read_settings, write_settings

logger = logging.getLogger(__name__)

# Every CALIBRATION_STEP-th name of the bundled index's KB calibrates the activation scales
# (4,250 names of 212,478).
CALIBRATION_STEP = 50


def _export_intact(path: Path) -> bool:
    meta = export_record(path)
    if not isinstance(meta, dict):
        return False
    return meta.get("format_version") == ONNX_FORMAT_VERSION and "files" in meta and damaged_file(path, meta) is None


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
    if encoder.pooling != "cls":
        pool_by_product(output / ONNX_FILE)
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


def pool_by_product(onnx_file: Path) -> None:
    """Rewrite, in place, the pooling's sum over tokens (`transformer.pool`: Mul by the token
    weights, ReduceSum over the tokens, then Div and the L2 norm) as a batched product, Transpose
    of the weights then MatMul ([B, 1, L] @ [B, L, H]): ONNX Runtime's ReduceSum over the middle
    axis rounds a batch of one row otherwise than many (61 of 384 components 1 ulp off), its
    MatMul each row alike in any batch, so a lone text runs alone (format 3). The weights, one or
    zero, are the same; so is every other node."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_file))
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def normalised(node) -> bool:  # the Div of the mean, whose result the L2 norm reads
        return node.op_type == "Div" and any(n.op_type == "ReduceL2" for n in consumers.get(node.output[0], ()))

    sums = [node for node in graph.node if node.op_type == "ReduceSum" and node.input[0] in producer
            and producer[node.input[0]].op_type == "Mul" and any(map(normalised, consumers.get(node.output[0], ())))]
    if len(sums) != 1:
        raise EncoderError(f"{onnx_file} has {len(sums)} pooling sums where the export writes one; export the model again.")
    total, mul = sums[0], producer[sums[0].input[0]]
    hidden, weights = mul.input  # weights: (batch, tokens, 1)
    at = list(graph.node).index(total)
    graph.initializer.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "/pool/axis"))
    product = [helper.make_node("Transpose", [weights], ["/pool/weights"], perm=[0, 2, 1]),
               helper.make_node("MatMul", ["/pool/weights", hidden], ["/pool/sum"]),
               helper.make_node("Squeeze", ["/pool/sum", "/pool/axis"], [total.output[0]])]
    graph.node.remove(total)
    for offset, node in enumerate(product):
        graph.node.insert(at + offset, node)
    if len(consumers[mul.output[0]]) == 1:
        graph.node.remove(mul)
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_file))


def _quantise_weights(fp32: Path, target: Path) -> None:
    """INT8_OPS' weights to int8, per channel: per-tensor int8 (the default) moved MiniLM's
    vectors to a mean cosine of 0.956 with fp32 on NCBI mentions, per channel to 0.991."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Its "consider pre-processing" note (a root-logger warning) is left out, and that record
    # alone: no logger's level changes, so another thread's records pass as they would.
    root, note = logging.getLogger(), _WithoutPreprocessingNote()
    root.addFilter(note)
    try:
        quantize_dynamic(fp32, target, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=list(INT8_OPS), extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.removeFilter(note)


class _WithoutPreprocessingNote(logging.Filter):
    """Drops ONNX Runtime's advice to pre-process a model before quantising it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing before quantization")


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
