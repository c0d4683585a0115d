"""The runtime as a user meets it, side by side with scispaCy's linker: cold start (from process
start to a loaded pipeline, imports included), mentions/s in batches (with and without our
mention cache) and one document per call, peak RSS and Acc@1 of the raw mentions. Each
measurement is a fresh process (runtime_child.py); rounds interleave the systems (A B A B …);
the table gives medians and the ratios ours / scispaCy. Beside them, the physical references: the
int8 encoder alone over the workload's distinct mention texts (mentions/s if linking cost nothing
else) and the share of it linking reaches, and each system's memory above the floor (its peak
RSS less that of the same process with spaCy and the documents loaded but no linker).

Workload: every document of NCBI-disease train+dev and BC5CDR train+dev from ../shared, entities
from the gold spans (about 24,900 mentions). Ours: the shipped default (int8 ONNX, the bundled
MeSH + MONDO index, 208k names). scispaCy: its EntityLinker (char 3-gram tf-idf + nmslib HNSW,
k = 30) over MeSH C/F03/D (97k names), built once by bench_linkers.py and cached under
$SPACY_SAPBERT_CACHE/bench/ (about 11 min on 2 cores).

With --venvs DIR each system runs in a minimal venv of its own, made there once (ours installed
again from this checkout on every run): ours from the
built wheel alone (the runtime, no torch), scispaCy from PyPI; without it both run in this
interpreter (where torch, if installed, is imported by thinc and costs both start-up time).

    python benchmarks/bench_runtime.py [--rounds 3] [--venvs /tmp/bench-venvs]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("runtime_child.py")
# scispaCy links one document per call whatever the caller does, so its one row serves both.
LINKING = [("ours", "batch"), ("scispacy", "batch"), ("ours", "nocache"), ("ours", "doc")]
# The references: each venv's floor (spaCy and the documents, no linker) and our encoder alone.
REFERENCES = [("ours", "floor"), ("scispacy", "floor"), ("ours", "encoder")]
RUNS = LINKING + REFERENCES


def scispacy_folder() -> Path:
    """Where bench_linkers.py caches scispaCy's index over MeSH C/F03/D."""
    cache = Path(os.environ.get("SPACY_SAPBERT_CACHE", Path.home() / ".cache" / "spacy-sapbert"))
    folder = cache / "bench" / "scispacy-mesh-C-F03-D"
    if not (folder / "kb.jsonl").exists():
        raise SystemExit(f"scispaCy's index is not built in {folder}; run `python benchmarks/bench_linkers.py "
                         "--only scispacy` once (about 11 min on 2 cores).")
    return folder


def make_venvs(folder: Path) -> dict:
    """{system: python} of a minimal venv per system, made in `folder` once."""
    pythons = {}
    for system in ("ours", "scispacy"):
        venv = folder / system
        python = venv / "bin" / "python"
        made = (venv / ".ready").exists()
        if not made:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            if system == "scispacy":
                subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "requirements.txt"),
                                "scispacy==0.6.2"], check=True)
        if system == "ours":
            # Ours is installed again on every run, so that the benchmark measures this checkout:
            # the runtime wheel and the bundled index's, which it requires.
            with tempfile.TemporaryDirectory() as dist:
                subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, str(ROOT),
                                str(ROOT / "dists" / "index")], check=True)
                wheels = [str(wheel) for wheel in sorted(Path(dist).glob("*.whl"))]
                if made:  # this checkout's wheels over the last ones, then any dependency they added
                    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                                    *wheels], check=True)
                subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "requirements.txt"),
                                *wheels], check=True)
        (venv / ".ready").touch()
        pythons[system] = str(python)
    return pythons


def run_child(python: str, system: str, mode: str, data_dir: Path, folder: Path) -> dict:
    env = dict(os.environ, BENCH_T0=repr(time.time()))
    out = subprocess.run([python, str(CHILD), system, mode, str(data_dir), str(folder)], capture_output=True,
                         text=True, env=env, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{system} ({mode}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    """Medians of each (system, mode), ratios to scispaCy's batch row, and the references: the
    share of the encoder-alone rate linking reaches, and memory above each venv's floor."""
    med = {key: {k: statistics.median(r[k] for r in rows) for k in ("cold_s", "mentions_per_s", "peak_rss_mb", "acc@1")}
           for key, rows in results.items()}
    theirs = med[("scispacy", "batch")]
    lines = [f"{'system':24} {'cold s':>7} {'mentions/s':>11} {'peak RSS MB':>12} {'Acc@1':>6}   "
             f"ratios vs scispaCy: cold  speed  RSS"]
    for system, mode in LINKING:
        m = med[(system, mode)]
        lines.append(f"{system + ', ' + mode:24} {m['cold_s']:7.2f} {m['mentions_per_s']:11.0f} {m['peak_rss_mb']:12.0f} "
                     f"{100 * m['acc@1']:6.2f}   {m['cold_s'] / theirs['cold_s']:24.2f} "
                     f"{m['mentions_per_s'] / theirs['mentions_per_s']:6.2f} {m['peak_rss_mb'] / theirs['peak_rss_mb']:4.2f}")
    encoder = med[("ours", "encoder")]["mentions_per_s"]
    distinct = results[("ours", "encoder")][0]["distinct"]
    lines.append(f"\nthe int8 encoder alone over the {distinct} distinct mention texts: {encoder:.0f} mentions/s; "
                 f"linking reaches {med[('ours', 'batch')]['mentions_per_s'] / encoder:.0%} of it in batches, "
                 f"{med[('ours', 'doc')]['mentions_per_s'] / encoder:.0%} one document per call")
    floor = {system: med[(system, "floor")]["peak_rss_mb"] for system in ("ours", "scispacy")}
    above_theirs = theirs["peak_rss_mb"] - floor["scispacy"]
    lines.append(f"memory above the floor (spaCy and the documents, no linker: ours {floor['ours']:.0f} MB, "
                 f"scispaCy {floor['scispacy']:.0f} MB): scispaCy {above_theirs:.0f} MB")
    for mode in ("batch", "doc"):
        above = med[("ours", mode)]["peak_rss_mb"] - floor["ours"]
        lines.append(f"  ours, {mode}: {above:.0f} MB, {above / above_theirs:.2f}x scispaCy's")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venvs", type=Path, help="run each system in a minimal venv of its own, made here once")
    args = parser.parse_args()
    folder = scispacy_folder()
    pythons = make_venvs(args.venvs) if args.venvs else {"ours": sys.executable, "scispacy": sys.executable}
    results = {run: [] for run in RUNS}
    for round_ in range(args.rounds):
        for system, mode in RUNS:
            row = run_child(pythons[system], system, mode, args.data_dir, folder)
            results[(system, mode)].append(row)
            print(f"round {round_ + 1}: {system}, {mode}: {row['mentions_per_s']:.0f} mentions/s, "
                  f"cold {row['cold_s']:.2f} s, {row['peak_rss_mb']:.0f} MB, torch imported: {row['torch']}", flush=True)
    mentions = results[LINKING[0]][0]["mentions"]
    print(f"\n{mentions} mentions, medians of {args.rounds} rounds"
          f"{', each system in its own minimal venv' if args.venvs else ', both in ' + sys.executable}:")
    print(table(results))


if __name__ == "__main__":
    main()
