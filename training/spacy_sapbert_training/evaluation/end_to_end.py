"""End-to-end linking on what users run: a pipeline's NER, abbreviations and linker over whole
documents of a corpus (BC5CDR, both labels; NCBI-disease, diseases), scored against the gold
spans and ids. Entities of a label the corpus does not annotate (an NER's chemicals in
NCBI-disease) are not scored.

A predicted entity is a span hit when a gold mention has the same boundaries and label (labels
compared case-insensitively), and a link hit when, besides, its `cui` is one of that mention's
gold ids (resolved by the linker's `resolve_id`: its KB's alternative ids, as the harness resolves
them, and the older ids of its names table); an entity left NIL
predicts no link. Precision, recall and
F1 of both are given per label and over all labels. Gold mentions the corpus marks unlinkable
(-1) are not in the gold set, so a prediction on one counts as a false positive.

NIL detection is scored too: an entity should be left NIL (`cui` None) when it overlaps no gold
mention, or has the boundaries of one that is unlinkable or whose ids the KB lacks, and should be
linked when it has the boundaries of a mention the KB can link; entities that only overlap a gold
mention are left out. NIL precision is the share of entities left NIL that should be, NIL recall
the share of those that should be NIL that were.
"""
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

from ..data import datasets as ds

# Each corpus scored end to end: its datasets (as datasets.PUBTATOR_FILES names them) and the
# entity label each one's mentions bear. NCBI-disease's mention classes (SpecificDisease,
# DiseaseClass, Modifier, CompositeMention) are all diseases.
CORPORA: Dict[str, Dict[str, str]] = {
    "bc5cdr": {"bc5cdr-disease": "Disease", "bc5cdr-chemical": "Chemical"},
    "ncbi-disease": {"ncbi-disease": "Disease"},
}
LABELS = {dataset: label for datasets in CORPORA.values() for dataset, label in datasets.items()}


def corpus_of(dataset: str) -> str:
    """The corpus a dataset's documents belong to ("bc5cdr-chemical" → "bc5cdr")."""
    return next(corpus for corpus, datasets in CORPORA.items() if dataset in datasets)


def gold_documents(split: str, data_dir: Path, fold: int = 0, corpus: str = "bc5cdr"
                   ) -> Tuple[Dict[str, str], Dict[str, List[Tuple[int, int, str, List[str]]]]]:
    """A corpus's documents (id → text) and their gold mentions (start, end, label, ids), every
    label it annotates; ids are [] for a mention the corpus marks unlinkable. split "train-fold":
    the train documents of fold `fold` (protocol.train_fold), where a pipe's settings are chosen
    before dev is read."""
    from ..data.protocol import TRAIN_FOLD, train_fold

    texts: Dict[str, str] = {}
    gold: Dict[str, List[Tuple[int, int, str, List[str]]]] = {}
    for dataset, label in CORPORA[corpus].items():
        if split == TRAIN_FOLD:
            corpus, _ = train_fold(ds.load_pubtator_split(dataset, "train", data_dir, keep_unlinkable=True), fold)
        else:
            corpus = ds.load_pubtator_split(dataset, split, data_dir, keep_unlinkable=True)
        for document in corpus.documents:
            texts[document.doc_id] = document.text
            gold.setdefault(document.doc_id, []).extend((m.start, m.end, label, m.ids) for m in document.mentions)
    return texts, gold


def _prf(tp: int, fp: int, fn: int) -> Dict[str, float]:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def evaluate_end_to_end(nlp, split: str, data_dir: Path, batch_size: int = 64, fold: int = 0,
                        corpus: str = "bc5cdr") -> dict:
    """Run `nlp` (ending in sapbert_linker) over `corpus`'s `split` and score spans and links of
    the labels the corpus annotates."""
    texts, gold = gold_documents(split, data_dir, fold, corpus)
    scored = {label.lower() for label in CORPORA[corpus].values()}
    resolve = nlp.get_pipe("sapbert_linker").resolve_id
    counts: Counter = Counter()
    ids = list(texts)
    for doc_id, doc in zip(ids, nlp.pipe((texts[i] for i in ids), batch_size=batch_size)):
        golds = {(start, end, label.lower()): {resolve(g) or g for g in gold_ids}
                 for start, end, label, gold_ids in gold.get(doc_id, []) if gold_ids}
        entities = [ent for ent in doc.ents if ent.label_.lower() in scored]
        counts.update(_nil_counts(entities, gold.get(doc_id, []), resolve))
        found_spans = set()
        for ent in entities:
            key = (ent.start_char, ent.end_char, ent.label_.lower())
            label = ent.label_.lower()
            found_spans.add(key)
            counts[("span", label, "tp" if key in golds else "fp")] += 1
            hit = key in golds and ent._.cui in golds[key]
            if ent._.cui is not None:  # a NIL entity predicts no link
                counts[("link", label, "tp" if hit else "fp")] += 1
            if key in golds and not hit:
                counts[("link", label, "fn")] += 1
        for key in golds:
            if key not in found_spans:
                counts[("span", key[2], "fn")] += 1
                counts[("link", key[2], "fn")] += 1
    labels = sorted({label for _, label, _ in counts})
    result: dict = {"dataset": corpus, "split": split, "documents": len(ids),
                    "gold_mentions": sum(len(v) for v in gold.values())}
    for kind in ("span", "link", "nil"):
        result[kind] = {label: _prf(*(counts[(kind, label, c)] for c in ("tp", "fp", "fn"))) for label in labels}
        result[kind]["all"] = _prf(*(sum(counts[(kind, label, c)] for label in labels) for c in ("tp", "fp", "fn")))
    return result


def _nil_counts(entities, gold: List[Tuple[int, int, str, List[str]]], resolve) -> Counter:
    """NIL detection over one document's scored entities (see the module's docstring): tp an
    entity rightly left NIL, fp one left NIL that the KB could link, fn one linked that should be NIL."""
    counts: Counter = Counter()
    linkable = {(start, end): any(resolve(g) for g in ids) for start, end, _, ids in gold}
    for ent in entities:
        span = (ent.start_char, ent.end_char)
        if span in linkable:
            should_nil = not linkable[span]
        elif any(start < ent.end_char and ent.start_char < end for start, end, _, _ in gold):
            continue  # overlaps a gold mention with other boundaries: neither
        else:
            should_nil = True
        left_nil = ent._.cui is None
        if left_nil or should_nil:
            counts[("nil", ent.label_.lower(), "tp" if left_nil and should_nil else "fp" if left_nil else "fn")] += 1
    return counts


def evaluate_gold_spans(nlp, split: str, data_dir: Path, batch_size: int = 64, fold: int = 0,
                        corpus: str = "bc5cdr") -> dict:
    """The pipe's own Acc@1 from the gold spans (the realistic protocol, docs/evaluation.md):
    each `corpus` document of `split` gets its gold
    mentions as entities (what the NER would give at best), and `nlp` without its NER
    (abbreviations, then sapbert_linker) links them. Acc@1: the entity with the mention's
    boundaries (widened to whole tokens) has as its first candidate (its `cui`, or for a NIL
    entity the first of its NIL candidates) one of the gold ids (resolved by the linker's
    `resolve_id`); linked_right: its `cui` is, at the pipe's threshold. An entity moved by a long form, or
    one left out because it overlaps another gold mention, is wrong. Per label, over every
    linkable mention and over those whose gold the index holds (reachable). A composite mention
    (several ids) is right when the first candidate is any of them."""
    from spacy.util import filter_spans

    texts, gold = gold_documents(split, data_dir, fold, corpus)
    linker = nlp.get_pipe("sapbert_linker")
    nil_attr = linker.attributes["nil_candidates"]
    ner = [name for name in nlp.pipe_names
           if nlp.get_pipe_meta(name).factory in ("ner", "sapbert_ner", "entity_ruler", "span_ruler", "tok2vec")]
    counts: Counter = Counter()
    ids = list(texts)
    docs, made = [], []  # made: each gold mention's entity boundaries (expanded to whole tokens)
    for doc_id in ids:
        doc = nlp.make_doc(texts[doc_id])
        spans = [doc.char_span(start, end, label=label, alignment_mode="expand")
                 for start, end, label, _ in gold.get(doc_id, [])]
        doc.ents = filter_spans([span for span in spans if span is not None])
        made.append([(span.start_char, span.end_char) if span is not None else None for span in spans])
        docs.append(doc)
    # Every gold span stays, NIL or not, and is the only entity (no repeats of its text added).
    dropping, linker.drop_unlinked = linker.drop_unlinked, False
    repeating, linker.repeated_entities = linker.repeated_entities, False
    try:
        with nlp.select_pipes(disable=ner):
            for doc_id, doc, bounds in zip(ids, nlp.pipe(docs, batch_size=batch_size), made):
                linked = {(ent.start_char, ent.end_char): ent._.cui for ent in doc.ents}
                top = {(ent.start_char, ent.end_char): ent._.cui or next(iter(c for c, _ in ent._.get(nil_attr) or ()), None)
                       for ent in doc.ents}
                for (_, _, label, gold_ids), bound in zip(gold.get(doc_id, []), bounds):
                    if not gold_ids:
                        continue
                    found = [linker.resolve_id(g) for g in gold_ids]
                    resolved = {f or g for f, g in zip(found, gold_ids)}
                    reachable = any(found)
                    for group in ("all", "reachable") if reachable else ("all",):
                        counts[(label.lower(), group, "n")] += 1
                        counts[(label.lower(), group, "right")] += top.get(bound) in resolved
                        counts[(label.lower(), group, "linked")] += linked.get(bound) in resolved
    finally:
        linker.drop_unlinked, linker.repeated_entities = dropping, repeating
    result: dict = {"dataset": corpus, "split": split, "documents": len(ids)}
    for label in sorted({label for label, _, _ in counts}):
        n, n_reachable = max(counts[(label, "all", "n")], 1), max(counts[(label, "reachable", "n")], 1)
        result[label] = {"n": counts[(label, "all", "n")], "n_reachable": counts[(label, "reachable", "n")],
                         "acc@1": counts[(label, "all", "right")] / n,
                         "acc@1_reachable": counts[(label, "reachable", "right")] / n_reachable,
                         "linked_right": counts[(label, "all", "linked")] / n,
                         "linked_right_reachable": counts[(label, "reachable", "linked")] / n_reachable}
    return result
