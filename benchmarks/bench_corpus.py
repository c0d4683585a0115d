"""Corpus linking: one process against Ray with N workers, side by side in one run.

The same documents (BC5CDR train + dev abstracts from ../shared, 1,000 by default, written as 10
JSONL files) go through `link --input DIR --output OUT_DIR` (the bundled NER, abbreviations and
the default linker), first with --engine local (one process, ONNX Runtime on every core), then
with --engine ray --workers N (a local Ray cluster; each worker one CPU and one pipeline). Each
run starts from an empty output folder in its own process. Prints wall time (the command's,
pipeline loads and Ray's start included), the linking time and mentions/s the command reports,
each worker's peak RSS, the ratio of the two rates, and checks that the outputs are identical.

    python benchmarks/bench_corpus.py [--docs 1000] [--workers 2] [--docs-per-shard 50]

The README's cluster projection multiplies the per-core rate measured here; it is arithmetic,
not a measurement on a cluster.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN = """
import json, sys
from pathlib import Path
from spacy_sapbert.corpus.linking import link_corpus
from spacy_sapbert.corpus.shards import LinkSettings
summary = link_corpus(sys.argv[1], Path(sys.argv[2]), LinkSettings(), engine=sys.argv[3],
                      workers=int(sys.argv[4]), docs_per_shard=int(sys.argv[5]), progress=False)
print(json.dumps({"documents": summary.documents, "mentions": summary.mentions, "seconds": summary.seconds,
                  "workers_peak_rss_mb": sorted(summary.worker_peak_rss_mb.values())}))
"""


def write_corpus(folder: Path, data_dir: Path, n_docs: int) -> None:
    from spacy_sapbert_training.data.datasets import load_pubtator_split

    docs = [d for split in ("train", "dev") for d in load_pubtator_split("bc5cdr-disease", split, data_dir).documents]
    docs = docs[:n_docs]
    per_file = max(1, -(-len(docs) // 10))
    folder.mkdir(parents=True)
    for part, start in enumerate(range(0, len(docs), per_file)):
        lines = [json.dumps({"id": d.doc_id, "text": d.text}) for d in docs[start:start + per_file]]
        (folder / f"abstracts{part:02d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run(folder: Path, out: Path, engine: str, workers: int, docs_per_shard: int) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN, str(folder), str(out), engine, str(workers), str(docs_per_shard)],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        sys.exit(f"{engine} run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    result["mentions_per_s"] = result["mentions"] / result["seconds"]
    return result


def shard_lines(out: Path) -> list:
    return [line for path in sorted(out.glob("*.jsonl")) for line in path.read_text(encoding="utf-8").splitlines()]


def main() -> None:
    from spacy_sapbert_training.data.datasets import DEFAULT_DATA_DIR

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--docs-per-shard", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    try:
        write_corpus(work / "in", args.data_dir, args.docs)
        rows = {"1 process (local)": run(work / "in", work / "local", "local", 1, args.docs_per_shard),
                f"Ray, {args.workers} workers": run(work / "in", work / "ray", "ray", args.workers, args.docs_per_shard)}
        identical = shard_lines(work / "local") == shard_lines(work / "ray")
    finally:
        outputs = {name: shard_lines(work / name) for name in ("local", "ray") if (work / name).exists()}
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'engine':<22} {'docs':>6} {'mentions':>9} {'wall s':>7} {'link s':>7} {'mentions/s':>11}  worker peak RSS (MB)")
    for name, r in rows.items():
        rss = ", ".join(f"{m:.0f}" for m in r["workers_peak_rss_mb"])
        print(f"{name:<22} {r['documents']:>6} {r['mentions']:>9} {r['wall_s']:>7.1f} {r['seconds']:>7.1f} "
              f"{r['mentions_per_s']:>11.0f}  {rss}")
    local, ray = rows.values()
    print(f"\nRay / local mentions/s: {ray['mentions_per_s'] / local['mentions_per_s']:.2f}x; "
          f"outputs identical: {identical} ({len(outputs.get('local', []))} documents)")


if __name__ == "__main__":
    main()
