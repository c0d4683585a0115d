"""Bring an int8/fp32 ONNX export of format 2 to format 3 in place, without exporting it again:
the pooling's sum over tokens (Mul by the token weights, then ReduceSum over the tokens) becomes
the batched product that `encoders.export` now writes ([B, 1, L] @ [B, L, H]), which ONNX Runtime
rounds the same way for one row as for many, so a lone text runs alone. Every weight and scale
stays as it was; a vector moves by at most a few ulps (the bundled default: links and their order
unchanged on the NCBI-disease and BC5CDR dev gold mentions, scores within 2e-7).

    python scripts/pool_by_product.py EXPORT_DIR

Needs the onnx package (the export's dependencies); the bundled default was brought so.
"""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from spacy_sapbert.cache import file_records
from spacy_sapbert.encoders.onnx import ONNX_FILE, TOKENIZER_FILE, export_record
from spacy_sapbert.encoders.settings import write_settings


def pool_by_product(graph: onnx.GraphProto) -> None:
    """Rewrite the pooling's Mul → ReduceSum(tokens) → Div (then ReduceL2) as Transpose(weights) →
    MatMul(hidden) → Squeeze, in place."""
    producer = {out: node for node in graph.node for out in node.output}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = [node for node in graph.node if node.op_type == "ReduceSum"
             and producer.get(node.input[0]) is not None and producer[node.input[0]].op_type == "Mul"
             and any(c.op_type == "Div" and any(d.op_type == "ReduceL2" for d in consumers.get(c.output[0], ()))
                     for c in consumers.get(node.output[0], ()))]
    if len(found) != 1:
        raise SystemExit(f"Found {len(found)} pooling sums where one was expected; export the model again instead.")
    total = found[0]
    mul = producer[total.input[0]]
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


def main(path: Path) -> None:
    meta = export_record(path)
    if not meta or meta.get("format_version") != 2 or meta.get("pooling") not in ("mean", "mention"):
        raise SystemExit(f"{path} is no format-2 export with mean or mention pooling.")
    model = onnx.load(str(path / ONNX_FILE))
    pool_by_product(model.graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(path / ONNX_FILE))
    meta = dict(meta, format_version=3, files=file_records(path, (ONNX_FILE, TOKENIZER_FILE)))
    write_settings(path, onnx=meta)
    print(f"{path}: pooling by product, format 3.")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
