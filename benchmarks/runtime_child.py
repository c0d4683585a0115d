"""One measurement of bench_runtime.py, run in a fresh process (and, with --venvs, in the system's
own minimal venv): it imports only the system under test, spaCy and the standard library.

    python runtime_child.py SYSTEM MODE DATA_DIR [SCISPACY_FOLDER]

SYSTEM: ours or scispacy. MODE: batch (nlp.pipe over every document, our mention cache on),
nocache (the same, cache off), doc (one nlp(doc) call per document, as a service calls it),
encoder (ours: the int8 encoder alone over the workload's distinct mention texts, in one encode
call: the rate linking would reach if nothing but the encoder cost time), floor (spaCy and the
documents loaded, no linker: the peak RSS that linking's memory is measured above).
Prints one JSON line: cold start (from the parent's spawn time, BENCH_T0, to a loaded pipeline:
imports included), mentions/s, peak RSS (of loading and linking: taken before scoring) and Acc@1
of the raw mentions against their gold ids.
"""
import json
import os
import resource
import sys
import time
from pathlib import Path

FILES = ("ncbi-disease/NCBItrainset_corpus.txt", "ncbi-disease/NCBIdevelopset_corpus.txt",
         "bc5cdr/CDR_TrainingSet.PubTator.txt", "bc5cdr/CDR_DevelopmentSet.PubTator.txt")


def read_pubtator(path: Path) -> list:
    """[(text, [(start, end, label, gold ids), …]), …] of a PubTator file."""
    documents, text, mentions = [], None, []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if "|t|" in line[:20]:
            text, mentions = line.split("|t|", 1)[1], []
        elif "|a|" in line[:20]:
            text += " " + line.split("|a|", 1)[1]
        elif "\t" in line:
            parts = line.split("\t")
            if len(parts) >= 6:
                ids = {i.strip() for i in parts[5].replace("+", "|").split("|") if i.strip() not in ("", "-1")}
                mentions.append((int(parts[1]), int(parts[2]), parts[4], ids))
        elif text is not None:
            documents.append((text, mentions))
            text = None
    return documents


def gold_docs(nlp, data_dir: Path):
    """Docs with doc.ents set from the gold spans (overlaps dropped), and each entity's gold ids."""
    from spacy.tokens import Span

    docs, golds = [], []
    for name in FILES:
        for text, mentions in read_pubtator(data_dir / name):
            doc = nlp.make_doc(text)
            spans, taken = [], set()
            for start, end, label, ids in mentions:
                span = doc.char_span(start, end, alignment_mode="expand")
                if span is None or taken.intersection(range(span.start, span.end)):
                    continue
                taken.update(range(span.start, span.end))
                spans.append((Span(doc, span.start, span.end, label=label), ids))
            spans.sort(key=lambda s: s[0].start)
            doc.ents = [s for s, _ in spans]
            docs.append(doc)
            golds.append([ids for _, ids in spans])
    return docs, golds


def load(system: str, mode: str, scispacy_folder: str):
    """(nlp, link, resolve): the pipeline, a function linking a list of docs, and gold-id
    resolution through the system's KB."""
    import spacy

    nlp = spacy.blank("en")
    if system == "ours":
        linker = nlp.add_pipe("sapbert_linker", config={"threshold": 0.0, "cache_size": 0 if mode == "nocache" else 10000})
        linker.initialize()
        # Linking never reads the KB; scoring reads it (for alternative ids) after the peak RSS is taken.
        resolve = lambda cui: linker.kb.resolve_id(cui)  # noqa: E731
        if mode == "doc":
            return nlp, lambda docs: [nlp(doc) for doc in docs], resolve
        return nlp, lambda docs: list(nlp.pipe(docs, batch_size=1000)), resolve
    from scispacy import candidate_generation as cg
    from scispacy.linking import EntityLinker
    from scispacy.linking_utils import KnowledgeBase

    kb = KnowledgeBase(str(Path(scispacy_folder) / "kb.jsonl"))
    aliases, vectorizer, ann_index = cg.LinkerPaths.from_directory(scispacy_folder).load()
    generator = cg.CandidateGenerator(ann_index, vectorizer, aliases, kb)
    linker = EntityLinker(candidate_generator=generator, resolve_abbreviations=False, k=30, threshold=0.0,
                          filter_for_definitions=False)
    return nlp, lambda docs: [linker(doc) for doc in docs], lambda cui: cui if cui in kb.cui_to_entity else None


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reference(system: str, mode: str, data_dir: Path) -> dict:
    """The floor (no linker) or the encoder alone (mode "encoder", ours): no links, so no Acc@1."""
    import spacy

    if mode == "encoder":
        from spacy_sapbert.pipe.loaders import EncoderLoader

        encoder = EncoderLoader().load()
    cold = time.time() - float(os.environ["BENCH_T0"])
    docs, _ = gold_docs(spacy.blank("en"), data_dir)
    n = sum(len(doc.ents) for doc in docs)
    seconds, texts = 0.0, []
    if mode == "encoder":
        texts = sorted({ent.text for doc in docs for ent in doc.ents})
        start = time.perf_counter()
        encoder.encode(texts)
        seconds = time.perf_counter() - start
    return {"system": system, "mode": mode, "cold_s": cold, "mentions": n, "distinct": len(texts),
            "mentions_per_s": n / seconds if seconds else 0.0, "peak_rss_mb": peak_rss_mb(), "acc@1": 0.0,
            "torch": "torch" in sys.modules}


def main():
    system, mode, data_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    folder = sys.argv[4] if len(sys.argv) > 4 else ""
    if mode in ("encoder", "floor"):
        print(json.dumps(reference(system, mode, data_dir)))
        return
    nlp, link, resolve = load(system, mode, folder)
    cold = time.time() - float(os.environ["BENCH_T0"])
    docs, golds = gold_docs(nlp, data_dir)
    start = time.perf_counter()
    linked = link(docs)
    seconds = time.perf_counter() - start
    peak = peak_rss_mb()
    n = sum(len(doc.ents) for doc in linked)
    right = sum(1 for doc, ids in zip(linked, golds) for ent, gold in zip(doc.ents, ids)
                if ent._.kb_ents and ent._.kb_ents[0][0] in {resolve(g) or g for g in gold})
    print(json.dumps({"system": system, "mode": mode, "cold_s": cold, "mentions": n, "mentions_per_s": n / seconds,
                      "peak_rss_mb": peak, "acc@1": right / n,
                      "torch": "torch" in sys.modules}))


if __name__ == "__main__":
    main()
