"""Our `sapbert_linker` against scispaCy's EntityLinker, side by side in one run.

Same mentions (NCBI-disease dev from ../shared, entities set from the gold spans), each system
in its own process so peak RSS is its own. One row per lever of our pipe (VARIANTS: precision,
index type, encoder batch, threads, cache, exact match, the hybrid score, the synonym-marginal ranking, exact names first; the last row is
the shipped default), then scispaCy. Prints mentions/s, load time, peak RSS, index build time
and Acc@1 of the raw mentions (no abbreviation or composite handling) for each, with the
ratios ours / scispaCy.

scispaCy's index covers MeSH descriptors in trees C, F03, D (15,695 concepts, 97,153 names);
ours is the bundled default (MeSH + MONDO, 38,159 concepts, 207,999 indexed names), so ours
searches twice the names and holds a larger KB: the ratios are conservative. For like-for-like
KBs, pass our cached MeSH-only index with --index (or rebuild scispaCy's over the bundled KB,
about 25 min on 2 cores, with --scispacy-kb default).

    python benchmarks/bench_linkers.py [--data-dir ../shared/data] [--threads 2]
    python benchmarks/bench_linkers.py --variants "int8 hnsw-sq8 (default)" --batch-size 1   # docs one at a time
    python benchmarks/bench_linkers.py --only ours --index runs/linking-index   # another index

The gold ids are resolved through our index's KB (OMIM ids of merged MONDO concepts count).
Index builds are cached (ours in the default cache, scispaCy's under
$SPACY_SAPBERT_CACHE/bench/); the build times printed are those measured when they were built.
"""
import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gold_docs(nlp, data_dir: Path):
    """NCBI dev documents with doc.ents set from the gold spans, and each entity's gold ids."""
    from spacy_sapbert_training.data.datasets import load_pubtator_split

    docs, golds = [], []
    for document in load_pubtator_split("ncbi-disease", "dev", data_dir).documents:
        doc = nlp.make_doc(document.text)
        spans, taken = [], set()
        for m in document.mentions:
            span = doc.char_span(m.start, m.end, label="Disease", alignment_mode="expand")
            if span is None or taken.intersection(range(span.start, span.end)):
                continue
            taken.update(range(span.start, span.end))
            spans.append((span, m.ids))
        spans.sort(key=lambda s: s[0].start)
        doc.ents = [s for s, _ in spans]
        docs.append(doc)
        golds.append([ids for _, ids in spans])
    return docs, golds


# Our pipe's levers, one row each (linker config overrides); "default" is the shipped config.
# Our pipe's levers, one row each: linker config overrides ("batch_size" is docs per nlp.pipe
# batch here). The last row is the shipped default.
VARIANTS = {
    "fp32 flat no-cache enc-batch-256": {"encoder": {"precision": "fp32", "batch_size": 256}, "cache_size": 0,
                                         "index": {"index": "default-exact"}},
    "fp32 flat": {"encoder": {"precision": "fp32"}, "index": {"index": "default-exact"}},
    "fp32 hnsw-sq8": {"encoder": {"precision": "fp32"}},
    "int8 flat": {"index": {"index": "default-exact"}},
    "int8 hnsw-sq8 enc-batch-256": {"encoder": {"batch_size": 256}},
    "int8 hnsw-sq8 1-ort-thread": {"encoder": {"threads": 1}},
    "int8 hnsw-sq8 1-doc-batches no-cache": {"batch_size": 1, "cache_size": 0},
    "int8 hnsw-sq8 1-doc-batches": {"batch_size": 1},
    "int8 hnsw-sq8 exact-match": {"scoring": {"exact_match": True}},
    "int8 hnsw-sq8 exact-match 1-doc-batches": {"scoring": {"exact_match": True}, "batch_size": 1},
    "int8 hnsw-sq8 dense only (sparse_weight 0)": {"scoring": {"sparse_weight": 0.0}},
    "int8 hnsw-sq8 best-name ranking (marginal_tau 0)": {"scoring": {"marginal_tau": 0.0}},
    "int8 hnsw-sq8 model order over exact names (exact_first false)": {"scoring": {"exact_first": False}},
    "int8 hnsw-sq8 (default)": {},
}


def measure(system: str, data_dir: Path, threads: int, index: str = "default", variant: str = "int8 hnsw-sq8 (default)",
            batch_size: int = 1000, scispacy_kb: str = "mesh") -> dict:
    """Run in a child process: load one system, link the docs, report figures."""
    import spacy
    import torch

    from spacy_sapbert.kb.bundled import default_kb, default_mesh_kb
    from spacy_sapbert.cache import cache_dir

    torch.set_num_threads(threads)
    nlp = spacy.blank("en")
    docs, golds = gold_docs(nlp, data_dir)
    start = time.perf_counter()
    if system == "ours":
        import spacy_sapbert  # noqa: F401

        config = {"threshold": 0.0, "label_types": {}, **VARIANTS[variant]}
        batch_size = config.pop("batch_size", batch_size)
        if index != "default":
            config["index"] = {"index": index}
        linker = nlp.add_pipe("sapbert_linker", config=config)
        linker.initialize()
        kb_ids = set(linker.kb.cui_to_entity)
        # A merged KB keeps other sources' ids (OMIM:…) as alternative ids of its concepts.
        golds = [[{linker.kb.resolve_id(g) or g for g in gold} for gold in doc_golds] for doc_golds in golds]
        build = linker.index.meta.get("build_seconds")
    else:
        from spacy_sapbert_training.evaluation.systems import ScispacyLinker

        kb = default_mesh_kb() if scispacy_kb == "mesh" else default_kb()[0]
        folder = cache_dir() / "bench" / ("scispacy-mesh-C-F03-D" if scispacy_kb == "mesh" else f"scispacy-{kb.name}")
        generator = ScispacyLinker(kb, folder=folder)
        from scispacy.linking import EntityLinker

        linker = EntityLinker(candidate_generator=generator.generator, resolve_abbreviations=False,
                              k=30, threshold=0.0, filter_for_definitions=False)
        nlp.add_pipe("sentencizer")  # a stand-in pipe; the linker is called on each doc below
        kb_ids = set(generator.generator.kb.cui_to_entity)
        build = generator.build_seconds
    load = time.perf_counter() - start
    # The timed window starts on a collected heap: the load leaves a full collection pending
    # (0.18 s over our KB's objects), and whether it fell inside the 0.3 s window or not hung
    # on how many objects any imported module made (one more import in spacy_sapbert_training.data.datasets
    # took ours from 2,300 to 1,500 mentions/s). Both systems get the same treatment.
    gc.collect()
    start = time.perf_counter()
    if system == "ours":
        linked = list(nlp.pipe(docs, batch_size=batch_size))  # docs in, entities already set
    else:
        linked = [linker(doc) for doc in docs]  # scispaCy's linker has no batched pipe()
    seconds = time.perf_counter() - start
    n = sum(len(d.ents) for d in linked)
    right = sum(1 for doc, ids in zip(linked, golds) for ent, gold in zip(doc.ents, ids)
                if ent._.kb_ents and ent._.kb_ents[0][0] in gold)
    reachable = sum(1 for ids in golds for gold in ids if any(g in kb_ids for g in gold))
    return {"system": system if system != "ours" else f"ours: {variant}", "mentions": n, "mentions_per_s": n / seconds, "load_s": load,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "index_build_s": build, "acc@1": right / n, "gold_reachable": reachable}


def _child(args, system: str, variant: str) -> dict:
    cmd = [sys.executable, __file__, "--child", system, "--variant", variant, "--data-dir", str(args.data_dir),
           "--threads", str(args.threads), "--index", args.index, "--batch-size", str(args.batch_size),
           "--scispacy-kb", args.scispacy_kb]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{system} ({variant}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=["ours", "scispacy"])
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"our rows, comma-separated, from: {', '.join(VARIANTS)}")
    parser.add_argument("--batch-size", type=int, default=1000, help="docs per batch (nlp.pipe's default is 1000)")
    parser.add_argument("--index", default="default", help="our index directory (default: the bundled default)")
    parser.add_argument("--scispacy-kb", choices=["mesh", "default"], default="mesh",
                        help="scispaCy's KB: MeSH C/F03/D, or the bundled default index's KB")
    parser.add_argument("--child", choices=["ours", "scispacy"], help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="int8 hnsw-sq8 (default)", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.data_dir, args.threads, args.index, args.variant, args.batch_size,
                                 args.scispacy_kb)))
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"Unknown variant(s) {unknown}; choose from {list(VARIANTS)}.")
    rows = []
    if args.only != "scispacy":
        rows += [_child(args, "ours", v) for v in variants]
    if args.only != "ours":
        rows.append(_child(args, "scispacy", ""))
    theirs = rows[-1] if args.only is None else None
    print(f"{'system':34} {'mentions/s':>11} {'load s':>7} {'peak RSS MB':>12} {'build s':>8} {'Acc@1':>6}"
          + ("   ratios vs scispaCy: speed  RSS  load" if theirs else ""))
    for r in rows:
        build = f"{r['index_build_s']:.0f}" if r["index_build_s"] else "n/a"
        line = (f"{r['system']:34} {r['mentions_per_s']:11.1f} {r['load_s']:7.1f} {r['peak_rss_mb']:12.0f} "
                f"{build:>8} {100 * r['acc@1']:6.1f}")
        if theirs and r is not theirs:
            line += (f"   {r['mentions_per_s'] / theirs['mentions_per_s']:26.2f} {r['peak_rss_mb'] / theirs['peak_rss_mb']:4.2f}"
                     f" {r['load_s'] / theirs['load_s']:5.2f}")
        print(line)
    ours = next((r for r in rows if r["system"].startswith("ours")), None)
    print(f"\n{rows[0]['mentions']} mentions in one nlp.pipe-style run of {args.batch_size} docs per batch, "
          f"{args.threads} threads" + (f"; gold spans whose ids our KB holds: {ours['gold_reachable']}" if ours else ""))


if __name__ == "__main__":
    main()
