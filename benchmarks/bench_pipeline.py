"""The whole bundled pipeline end to end (NER + abbreviations + `sapbert_linker`), and the NER
alone, over the BC5CDR and NCBI-disease dev abstracts (600 documents), for two NERs side by
side: documents/s over `nlp.pipe` on 2 cores, milliseconds per abstract with one `nlp(text)` call
per document on one core (the process pinned to one CPU), and peak RSS. Each measurement is a
fresh process; rounds interleave the NERs (A B A B …); the table gives medians and the ratios
of the second NER to the first.

    python benchmarks/bench_pipeline.py OLD_NER NEW_NER [--rounds 3]

OLD_NER, NEW_NER: spaCy pipeline directories whose NER sets doc.ents (the bundled one is
spacy_sapbert/assets/ner; an earlier one can be checked out with `git show`/`git worktree`).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("bc5cdr/CDR_DevelopmentSet.PubTator.txt", "ncbi-disease/NCBIdevelopset_corpus.txt")
MODES = ("pipeline", "ner", "pipeline-1cpu")


def texts(data_dir: Path) -> list:
    """Title and abstract of every document of the dev files."""
    out, text = [], None
    for name in FILES:
        for line in (data_dir / name).read_text(encoding="utf-8").splitlines():
            if "|t|" in line[:20]:
                text = line.split("|t|", 1)[1]
            elif "|a|" in line[:20] and text is not None:
                out.append(text + " " + line.split("|a|", 1)[1])
                text = None
    return out


def child(ner: str, mode: str, data_dir: Path) -> dict:
    """One measurement, in this (fresh) process."""
    if mode == "pipeline-1cpu":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import spacy

    from spacy_sapbert.pipe.bundled import demo_pipeline

    docs = texts(data_dir)
    nlp = spacy.load(ner) if mode == "ner" else demo_pipeline(ner=ner)
    nlp("Warm-up: cisplatin-induced nephrotoxicity.")
    entities = 0
    start = time.perf_counter()
    if mode == "pipeline-1cpu":
        per_doc = []
        for text in docs:
            t0 = time.perf_counter()
            entities += len(nlp(text).ents)
            per_doc.append(1000 * (time.perf_counter() - t0))
        extra = {"ms_per_doc_median": statistics.median(per_doc), "ms_per_doc_mean": statistics.mean(per_doc)}
    else:
        for doc in nlp.pipe(docs, batch_size=64):
            entities += len(doc.ents)
        extra = {}
    seconds = time.perf_counter() - start
    return {"docs": len(docs), "entities": entities, "docs_per_s": len(docs) / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the first NER pipeline (the baseline of the ratios)")
    parser.add_argument("new", help="the second NER pipeline")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("NER", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.data_dir)))
        return
    results = {}
    for round_ in range(args.rounds):
        for mode in MODES:
            for which, ner in (("old", args.old), ("new", args.new)):
                out = subprocess.run([sys.executable, __file__, args.old, args.new, "--data-dir", str(args.data_dir),
                                      "--child", ner, mode], capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{which} ({mode}) failed:\n{out.stderr[-3000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results.setdefault((mode, which), []).append(row)
                print(f"round {round_ + 1}: {mode}, {which}: {json.dumps(row)}", flush=True)
    print(f"\nmedians of {args.rounds} rounds; old = {args.old}, new = {args.new}")
    print(f"{'':16} {'docs/s old':>10} {'docs/s new':>10} {'ratio':>6} {'RSS MB old':>10} {'RSS MB new':>10} {'ratio':>6}")
    for mode in MODES:
        m = {w: {k: statistics.median(r[k] for r in results[(mode, w)]) for k in ("docs_per_s", "peak_rss_mb")}
             for w in ("old", "new")}
        print(f"{mode:16} {m['old']['docs_per_s']:10.1f} {m['new']['docs_per_s']:10.1f} "
              f"{m['new']['docs_per_s'] / m['old']['docs_per_s']:6.2f} {m['old']['peak_rss_mb']:10.0f} "
              f"{m['new']['peak_rss_mb']:10.0f} {m['new']['peak_rss_mb'] / m['old']['peak_rss_mb']:6.2f}")
    for which in ("old", "new"):
        ms = statistics.median(r["ms_per_doc_median"] for r in results[("pipeline-1cpu", which)])
        mean = statistics.median(r["ms_per_doc_mean"] for r in results[("pipeline-1cpu", which)])
        print(f"one abstract per call on one CPU, {which}: median {ms:.1f} ms, mean {mean:.1f} ms")


if __name__ == "__main__":
    main()
