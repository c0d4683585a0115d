"""FAISS index types at UMLS size: a synthetic KB of N rows (4M by default) grown from an exact
index's real name vectors, built from disk, side by side in one run.

UMLS has about 4M English names; its licence keeps it off this machine. The rows here are the
exact index's own vectors (the full open ontology set: 924,538 names, `build-index --kb
corpus/ontology.jsonl`) plus perturbed copies of them (Gaussian noise, cosine about 0.95 to the
original, renormalised), each copy naming its original's concept, written chunk by chunk to a
float32 .npy file that no process loads whole (streamed.DiskVectors reads it in chunks). Truth is exact search over that file in
chunks. Each index type is then built from the file by builders.make_faiss_index (trained on a
sample, filled chunk by chunk: the streamed build's path) in its own process, saved, and
searched with the distinct NCBI + BC5CDR dev mentions (int8, as the pipe encodes them). Prints
size, build time, peak RSS of build and search, ms/query and recall@10 of concepts.

    python benchmarks/bench_umls_scale.py --index runs/umls-sim/exact [--rows 4000000] [--types hnsw-sq8,ivfpq] [--ef-search 256,512]
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
K = 10
ROWS_FETCHED = 400  # rows per query to find K distinct concepts among copies
CHUNK = 1 << 16


def synthetic_rows(exact_dir: Path, n_rows: int, out: Path, noise: float = 0.016) -> np.ndarray:
    """Write n_rows vectors to `out` (.npy, float32): the real ones, then perturbed copies of them
    in order; return each row's concept position."""
    from spacy_sapbert.search.index import ROWS_FILE, ConceptIndex

    exact = ConceptIndex.load(exact_dir)
    n_real = exact.index.ntotal
    concepts = np.load(exact_dir / ROWS_FILE)
    vectors = np.lib.format.open_memmap(out, mode="w+", dtype=np.float32, shape=(n_rows, exact.index.d))
    rng = np.random.default_rng(0)
    for start in range(0, n_rows, CHUNK):
        stop = min(n_rows, start + CHUNK)
        source = np.arange(start, stop) % n_real
        block = exact.index.reconstruct_batch(source)
        if start >= n_real:
            block = block + rng.standard_normal(block.shape).astype(np.float32) * noise
            block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[start:stop] = block
    vectors.flush()
    return concepts[np.arange(n_rows) % n_real]


def top_concepts(scores: np.ndarray, rows: np.ndarray, row_concepts: np.ndarray) -> list:
    from spacy_sapbert.ranking.concepts import best_concepts

    return [{c for c, _ in best_concepts(s, r, row_concepts, K)} for s, r in zip(scores, rows)]


def exact_truth(vectors: np.ndarray, queries: np.ndarray, row_concepts: np.ndarray) -> list:
    """Exact top-K concepts of each query, scanning the memory-mapped rows a chunk at a time."""
    best_scores = np.full((len(queries), ROWS_FETCHED), -np.inf, dtype=np.float32)
    best_rows = np.full((len(queries), ROWS_FETCHED), -1, dtype=np.int64)
    for start in range(0, len(vectors), CHUNK * 4):
        block = np.asarray(vectors[start:start + CHUNK * 4])
        scores = queries @ block.T
        part = np.argpartition(-scores, ROWS_FETCHED - 1, axis=1)[:, :ROWS_FETCHED]
        merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, part, 1)], axis=1)
        merged_rows = np.concatenate([best_rows, part + start], axis=1)
        keep = np.argsort(-merged_scores, axis=1, kind="stable")[:, :ROWS_FETCHED]
        best_scores = np.take_along_axis(merged_scores, keep, 1)
        best_rows = np.take_along_axis(merged_rows, keep, 1)
    return top_concepts(best_scores, best_rows, row_concepts)


def child(vector_file: Path, index_type: str, queries_file: Path, saved: Path, ef_search: Sequence[int]) -> dict:
    """Build `index_type` from the rows on disk, save it, then search it (for a graph, at each
    efSearch): one process, so its peak RSS is the build's."""
    import faiss

    from bench_indexes import peak_rss_mb
    from spacy_sapbert.search.builders import _search_params, make_faiss_index
    from spacy_sapbert.search.streamed import DiskVectors

    faiss.omp_set_num_threads(2)
    vectors = DiskVectors(vector_file)  # read a chunk at a time, never mapped: RSS is the index's
    start = time.perf_counter()
    index = make_faiss_index(vectors, index_type)
    build = time.perf_counter() - start
    build_rss = peak_rss_mb()
    faiss.write_index(index, str(saved))
    queries = np.load(queries_file)
    searches = {}
    graph = isinstance(faiss.downcast_index(index), faiss.IndexHNSW)
    for ef in (ef_search if graph else [0]):
        params = faiss.SearchParametersHNSW(efSearch=ef) if graph else _search_params(index, None)
        start = time.perf_counter()
        scores, rows = index.search(queries, ROWS_FETCHED, params=params)
        searches[ef] = 1000 * (time.perf_counter() - start) / len(queries)
        np.save(saved.with_suffix(f".ef{ef}.rows.npy"), rows)
        np.save(saved.with_suffix(f".ef{ef}.scores.npy"), scores)
    return {"build_s": build, "build_peak_rss_mb": build_rss, "ms_per_query": searches,
            "size_mb": saved.stat().st_size / 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="an exact (flat) index directory")
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--types", default="hnsw-sq8,ivfpq")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, help="folder for the synthetic rows (6 GB at 4M; default: a temporary one)")
    parser.add_argument("--ef-search", default="256,512", help="efSearch values to search a graph index with")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        vector_file, index_type, queries_file, saved = args.child
        ef_search = [int(e) for e in args.ef_search.split(",")]
        print(json.dumps(child(Path(vector_file), index_type, Path(queries_file), Path(saved), ef_search)))
        return
    from bench_indexes import queries

    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        row_concepts = synthetic_rows(args.index, args.rows, tmp / "rows.npy")
        print(f"{args.rows:,} synthetic rows written in {time.perf_counter() - start:.0f} s", flush=True)
        query_file = queries(args.index, args.data_dir, tmp / "queries.npy")
        start = time.perf_counter()
        truth = exact_truth(np.load(tmp / "rows.npy", mmap_mode="r"), np.load(query_file), row_concepts)
        print(f"exact search, streamed: {1000 * (time.perf_counter() - start) / len(truth):.1f} ms/query", flush=True)
        for index_type in [t.strip() for t in args.types.split(",") if t.strip()]:
            saved = tmp / f"{index_type}.faiss"
            cmd = [sys.executable, __file__, "--index", str(args.index), "--ef-search", args.ef_search,
                   "--child", str(tmp / "rows.npy"), index_type, str(query_file), str(saved)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"{index_type}: failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            result = json.loads(out.stdout.strip().splitlines()[-1])
            for ef, ms in result["ms_per_query"].items():
                found = top_concepts(np.load(saved.with_suffix(f".ef{ef}.scores.npy")),
                                     np.load(saved.with_suffix(f".ef{ef}.rows.npy")), row_concepts)
                recall = float(np.mean([len(t & f) / max(1, len(t)) for t, f in zip(truth, found)]))
                label = f"{index_type} efSearch {ef}" if ef != "0" else index_type
                print(f"{label:22} {result['size_mb']:8.0f} MB  build {result['build_s']:7.0f} s  "
                      f"build peak RSS {result['build_peak_rss_mb']:6.0f} MB  {ms:7.3f} ms/query  "
                      f"recall@10 {recall:.4f}", flush=True)
    print(f"\n{args.rows:,} rows ({len(truth)} distinct NCBI + BC5CDR dev mentions, int8); recall@10 of concepts "
          "against exact search over the same rows")


if __name__ == "__main__":
    main()
