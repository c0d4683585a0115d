"""Bring an int8/fp32 ONNX export of format 2 to format 3 in place, without exporting it again:
`encoders.export.pool_by_product` rewrites the pooling's sum over tokens as the batched product
that exports now carry, so a lone text runs alone. Every weight and scale stays as it was; a
vector moves by a few ulps at most (the bundled default: links and their order unchanged on the
NCBI-disease and BC5CDR dev gold mentions, scores within 2e-7). The bundled default was brought
so.

    python scripts/pool_by_product.py EXPORT_DIR

Needs the onnx package (the export's dependencies).
"""
import sys
from pathlib import Path

from spacy_sapbert.cache import file_records
from spacy_sapbert.encoders.export import pool_by_product
from spacy_sapbert.encoders.onnx import ONNX_FILE, TOKENIZER_FILE, export_record
from spacy_sapbert.encoders.settings import write_settings


def main(path: Path) -> None:
    meta = export_record(path)
    if not meta or meta.get("format_version") != 2 or meta.get("pooling") == "cls":
        raise SystemExit(f"{path} is no format-2 export with mean or mention pooling.")
    pool_by_product(path / ONNX_FILE)
    write_settings(path, onnx=dict(meta, format_version=3, files=file_records(path, (ONNX_FILE, TOKENIZER_FILE))))
    print(f"{path}: pooling by product, format 3.")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
