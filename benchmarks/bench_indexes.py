"""FAISS index types side by side: size, build time, search speed, peak RSS and recall@10 of
concepts against exact search, over one exact index's own vectors (no encoding).

Queries are the distinct mentions of NCBI-disease and BC5CDR dev, encoded once by the index's
model at int8 (as the pipe encodes them). Each index type is built, saved and then searched in
its own process (peak RSS: Python, numpy, FAISS and that index); "mmap" rows read the saved
file memory-mapped. Build is the conversion from the exact index's vectors.

    python benchmarks/bench_indexes.py                      # the default MeSH C/F03/D index
    python benchmarks/bench_indexes.py --index runs/linking-index --types flat,sq8,hnsw-sq8,ivfpq
    python benchmarks/bench_indexes.py --index runs/linking-index --types flat,sq6:256,hnsw-sq6:256
"""
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from spacy_sapbert.ranking.concepts import search_concepts

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TYPES = ("flat", "sq8", "hnsw", "hnsw-sq8", "ivfpq")
K = 10


def exact_index_dir(index: str) -> Path:
    if index != "default":
        return Path(index)
    from spacy_sapbert.encoders.models import default_model_path
    from spacy_sapbert.search.resolve import exact_default_index_path
    from spacy_sapbert.encoders.transformer import TorchEncoder

    return exact_default_index_path(TorchEncoder(default_model_path()))


def queries(index_dir: Path, data_dir: Path, out: Path) -> Path:
    """Encode the dev mentions with the index's model at int8; save them as .npy."""
    from spacy_sapbert.encoders.models import default_model_path
    from spacy_sapbert.encoders.loading import load_encoder
    from spacy_sapbert.search.index import ConceptIndex
    from spacy_sapbert_training.data.datasets import load_pubtator_split

    texts = sorted({m.text for dataset in ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")
                    for doc in load_pubtator_split(dataset, "dev", data_dir).documents for m in doc.mentions})
    meta = json.loads((index_dir / "meta.json").read_text())
    model = meta["model"] if Path(meta["model"]).exists() else str(default_model_path())
    encoder = load_encoder(model, "int8")
    ConceptIndex.load(index_dir, encoder=encoder)  # refuses a model the index was not built with
    np.save(out, encoder.encode(texts))
    return out


def child(saved: Path, query_file: Path, mmap: bool) -> dict:
    """Load one saved index (memory-mapped if asked) and search it; report figures and results."""
    import faiss

    from spacy_sapbert.search.index import ConceptIndex

    faiss.omp_set_num_threads(2)
    vectors = np.load(query_file)
    start = time.perf_counter()
    loaded = ConceptIndex.load(saved, mmap=mmap)
    load = time.perf_counter() - start
    start = time.perf_counter()
    found = [[c for c, _ in row] for row in search_concepts(loaded, vectors, k=K)]
    search = time.perf_counter() - start
    return {"load_s": load, "ms_per_query": 1000 * search / len(vectors), "found": found,
            "peak_rss_mb": peak_rss_mb()}


def convert(exact, kind: str):
    """`exact` as index type `kind`: "sq6", or "sq6:256" (projected to 256 dimensions), or
    "hnsw-sq6:256" (the graph over those codes, as the bundled index is unpacked)."""
    index_type, _, dim = kind.partition(":")
    if index_type == "flat" and not dim:
        return exact
    if index_type.startswith("hnsw-") and dim:
        return exact.converted(index_type[len("hnsw-"):], dim=int(dim)).converted(index_type)
    return exact.converted(index_type, dim=int(dim) if dim else None)


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM): getrusage's ru_maxrss survives exec, so a child
    would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", default="default", help="an exact (flat) index directory, or default")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--types", default=",".join(TYPES) + ",flat mmap,hnsw-sq8 mmap")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--queries", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.queries, args.mmap)))
        return
    from spacy_sapbert.search.index import FAISS_FILE, ConceptIndex

    index_dir = exact_index_dir(args.index)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        query_file = queries(index_dir, args.data_dir, Path(tmp) / "queries.npy")
        exact = ConceptIndex.load(index_dir)
        vectors = np.load(query_file)
        exact_found = [[c for c, _ in row] for row in search_concepts(exact, vectors, k=K)]
        truth = [set(row) for row in exact_found]
        for kind in [t.strip() for t in args.types.split(",") if t.strip()]:
            index_type, _, mmap = kind.partition(" ")
            saved = Path(tmp) / index_type
            start = time.perf_counter()
            if not saved.exists():
                convert(exact, index_type).save(saved)
            build = time.perf_counter() - start
            cmd = [sys.executable, __file__, "--child", str(saved), "--queries", str(query_file)]
            out = subprocess.run(cmd + (["--mmap"] if mmap == "mmap" else []), capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{kind}: failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            result = json.loads(out.stdout.strip().splitlines()[-1])
            found = result.pop("found")
            recall = float(np.mean([len(t & set(f)) / max(1, len(t)) for t, f in zip(truth, found)]))
            top1 = float(np.mean([bool(f) and bool(e) and f[0] == e[0] for e, f in zip(exact_found, found)]))
            rows.append({**result, "type": kind, "size_mb": (saved / FAISS_FILE).stat().st_size / 1e6,
                         "build_s": build if index_type != "flat" else 0.0, "recall@10": recall, "top1": top1})
    print(f"{'index':14} {'MB':>6} {'build s':>8} {'load s':>7} {'ms/query':>9} {'recall@10':>10} {'top-1':>7} {'peak RSS MB':>12}")
    for r in rows:
        print(f"{r['type']:14} {r['size_mb']:6.0f} {r['build_s']:8.1f} {r['load_s']:7.2f} {r['ms_per_query']:9.3f} "
              f"{r['recall@10']:10.4f} {r['top1']:7.4f} {r['peak_rss_mb']:12.0f}")
    if rows:
        print(f"\n{len(truth)} distinct NCBI + BC5CDR dev mentions (int8-encoded); recall@10 of concepts "
              f"and top-1 agreement against exact flat search; {index_dir}")


if __name__ == "__main__":
    main()
