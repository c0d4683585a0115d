"""Our `sapbert_linker` against scispaCy's EntityLinker, side by side in one run.

Same knowledge base (MeSH descriptors, trees C, F03, D: 15,695 concepts, 97,153 names), same
mentions (NCBI-disease dev from ../shared, entities set from the gold spans), each system in
its own process so peak RSS is its own. Prints mentions/s, load time, peak RSS, index build
time and lenient Acc@1 for each, then the ratios ours / scispaCy.

    python benchmarks/bench_linkers.py [--data-dir ../shared/data] [--threads 2]
    python benchmarks/bench_linkers.py --only ours --index runs/linking-index   # another KB

With --index the gold ids are resolved through the index's KB (OMIM ids of merged MONDO
concepts count), and scispaCy, still on MeSH C/F03/D, is no longer a like-for-like comparison.

Index builds are cached (ours in the default cache, scispaCy's under
$SPACY_SAPBERT_CACHE/bench/); the build times printed are those measured when they were built.
"""
import argparse
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
    from training.datasets import load_pubtator_split

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


def measure(system: str, data_dir: Path, threads: int, index: str = "default") -> dict:
    """Run in a child process: load one system, link the docs, report figures."""
    import spacy
    import torch

    from spacy_sapbert.defaults import cache_dir, default_mesh_kb

    torch.set_num_threads(threads)
    nlp = spacy.blank("en")
    docs, golds = gold_docs(nlp, data_dir)
    start = time.perf_counter()
    if system == "ours":
        import spacy_sapbert  # noqa: F401

        linker = nlp.add_pipe("sapbert_linker", config={"threshold": -1.0, "label_types": {}, "index": index})
        linker.initialize()
        kb_ids = set(linker.kb.cui_to_entity)
        # A merged KB keeps other sources' ids (OMIM:…) as alternative ids of its concepts.
        golds = [[{linker.kb.resolve_id(g) or g for g in gold} for gold in doc_golds] for doc_golds in golds]
        build = json.loads((Path(linker.index_name if linker.index_name != "default" else
                                 _our_index(linker)) / "meta.json").read_text()).get("build_seconds")
    else:
        from training.systems import ScispacyLinker

        folder = cache_dir() / "bench" / "scispacy-mesh-C-F03-D"
        generator = ScispacyLinker(default_mesh_kb(), folder=folder)
        from scispacy.linking import EntityLinker

        linker = EntityLinker(candidate_generator=generator.generator, resolve_abbreviations=False,
                              k=30, threshold=0.0, filter_for_definitions=False)
        nlp.add_pipe("sentencizer")  # a stand-in pipe; the linker is called on each doc below
        kb_ids = set(generator.generator.kb.cui_to_entity)
        build = generator.build_seconds
    load = time.perf_counter() - start
    start = time.perf_counter()
    if system == "ours":
        linked = list(nlp.get_pipe("sapbert_linker").pipe(docs, batch_size=256))
    else:
        linked = [linker(doc) for doc in docs]  # scispaCy's linker has no batched pipe()
    seconds = time.perf_counter() - start
    n = sum(len(d.ents) for d in linked)
    right = sum(1 for doc, ids in zip(linked, golds) for ent, gold in zip(doc.ents, ids)
                if ent._.kb_ents and ent._.kb_ents[0][0] in gold)
    reachable = sum(1 for ids in golds for gold in ids if any(g in kb_ids for g in gold))
    return {"system": system, "mentions": n, "mentions_per_s": n / seconds, "load_s": load,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "index_build_s": build, "acc@1": right / n, "gold_reachable": reachable}


def _our_index(linker) -> Path:
    from spacy_sapbert.defaults import default_index_path

    return default_index_path(linker.encoder)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=["ours", "scispacy"])
    parser.add_argument("--index", default="default", help="our index directory (default: the MeSH C/F03/D default)")
    parser.add_argument("--child", choices=["ours", "scispacy"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.data_dir, args.threads, args.index)))
        return
    rows = {}
    for system in [args.only] if args.only else ["ours", "scispacy"]:
        out = subprocess.run([sys.executable, __file__, "--child", system, "--data-dir", str(args.data_dir),
                              "--threads", str(args.threads), "--index", args.index], capture_output=True, text=True, check=True)
        rows[system] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'system':10} {'mentions/s':>11} {'load s':>8} {'peak RSS MB':>12} {'build s':>8} {'Acc@1':>6}")
    for r in rows.values():
        build = f"{r['index_build_s']:.0f}" if r["index_build_s"] else "n/a"
        print(f"{r['system']:10} {r['mentions_per_s']:11.1f} {r['load_s']:8.1f} {r['peak_rss_mb']:12.0f} "
              f"{build:>8} {100 * r['acc@1']:6.1f}")
    if len(rows) == 2:
        ours, theirs = rows["ours"], rows["scispacy"]
        print(f"\nratios ours/scispaCy: throughput {ours['mentions_per_s'] / theirs['mentions_per_s']:.2f}, "
              f"peak RSS {ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}, load {ours['load_s'] / theirs['load_s']:.2f}"
              + (f", index build {ours['index_build_s'] / theirs['index_build_s']:.2f}"
                 if ours["index_build_s"] and theirs["index_build_s"] else ""))
        print(f"mentions: {ours['mentions']}; gold spans whose ids our KB holds: {ours['gold_reachable']}")
    elif "ours" in rows:
        print(f"mentions: {rows['ours']['mentions']}; gold spans whose ids our KB holds: {rows['ours']['gold_reachable']}")


if __name__ == "__main__":
    main()
