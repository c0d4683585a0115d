"""Benchmark evaluation in the papers' protocols: `spacy-sapbert evaluate …`."""
import json
import logging
import statistics
import time
from enum import Enum
from pathlib import Path
from typing import List, Optional, Sequence

import catalogue
import numpy as np
import typer
from wasabi import msg

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase

from ..data import datasets as ds
from ..data.datasets import DEFAULT_DATA_DIR
from ..data.protocol import TRAIN_FOLD, TRAIN_FOLDS, Task, prepare
from .scoring import MAX_K, accuracy_at_k
from .systems import CharTfidf, EncoderSystem, ExactMatch, LinkingSystem, ScispacyLinker

logger = logging.getLogger(__name__)

RELATEDNESS_DATASETS = ("mayosrs", "umnsrs")
# The vector space's own quality, on the bundled KB (spacy_sapbert_training.evaluation.conceptual).
CONCEPTUAL_DATASETS = ("mcsm", "synonym-pairs")
# Where the model links as the pipe's default parenthetical_labels (Chemical) do.
PARENTHETICAL_DATASETS = ("bc5cdr-chemical",)


# The linking systems the harness evaluates (`--system`): each a function of the dictionary and
# the model options, registered by name (a package adds one through the entry-point group
# "spacy_sapbert_systems").
systems = catalogue.create("spacy_sapbert", "systems", entry_points=True)


@systems.register("exact")
def _exact(dictionary: KnowledgeBase, **options) -> LinkingSystem:
    return ExactMatch(dictionary)


@systems.register("tfidf")
def _tfidf(dictionary: KnowledgeBase, **options) -> LinkingSystem:
    return CharTfidf(dictionary)


@systems.register("scispacy")
def _scispacy(dictionary: KnowledgeBase, **options) -> LinkingSystem:
    return ScispacyLinker(dictionary)


@systems.register("model")
def _model(dictionary: KnowledgeBase, model: Optional[str] = None, **options) -> LinkingSystem:
    return EncoderSystem(dictionary, model or "default", **options)


def make_system(system: str, dictionary: KnowledgeBase, model: Optional[str] = None,
                precision: str = "fp32", index_type: str = "flat", sparse_weight: Optional[float] = None,
                names_precision: str = "fp32", marginal_tau: Optional[float] = None,
                calibration: Optional[Path] = None) -> LinkingSystem:
    """The linking system `system` (one of `systems`) over `dictionary`; for "model", `calibration`
    is the index whose names calibrate an int8 export made for it (None: the bundled index's, as
    the pipe calibrates with its default index, so the dev figures are what the shipped pipe gets)."""
    if system not in systems:
        raise ValueError(f"Unknown system {system!r}; use one of {', '.join(systems.get_all())}.")
    return systems.get(system)(dictionary, model=model, precision=precision, index_type=index_type,
                               sparse_weight=sparse_weight, names_precision=names_precision,
                               marginal_tau=marginal_tau, calibration=calibration)


def evaluate_linking(task: Task, system: LinkingSystem, parentheticals: bool = False) -> dict:
    """Rank every query part and score the rankings; with `parentheticals` (a system that scores,
    as the pipe's model does), a mention named in parentheses takes the ranking of the mention
    before it as the pipe's parenthetical_labels do (mentions.parenthetical)."""
    context = getattr(system, "context", None)
    asked = part_windows(task, context["window"]) if context else [q.parts for q in task.queries]
    texts = sorted({part for parts in asked for part in parts})
    start = time.perf_counter()
    if parentheticals:
        scored = dict(zip(texts, system.rank_scored(texts, k=MAX_K)))
        ranked = {text: [c for c, _ in row] for text, row in scored.items()}
    else:
        ranked = dict(zip(texts, system.rank(texts, k=MAX_K)))
    seconds = time.perf_counter() - start
    resolve = task.dictionary.resolve_id
    golds = [{resolve(g) or g for g in q.gold} for q in task.queries]
    rankings = [[ranked[p] for p in parts] for parts in asked]
    if parentheticals:
        rankings = _follow_parentheticals(task, asked, scored, rankings)
    accuracy = accuracy_at_k(rankings, golds)
    # A query whose gold the dictionary holds (some id of it; retired ids are not): the headline
    # over these says what the linker gets right of what it could.
    reachable = [i for i, gold in enumerate(golds) if any(g in task.dictionary.cui_to_entity for g in gold)]
    over_reachable = accuracy_at_k([rankings[i] for i in reachable], [golds[i] for i in reachable])
    return {
        "n": len(task.queries), "n_parts": sum(len(q.parts) for q in task.queries),
        "n_unlinkable_excluded": task.n_unlinkable, "n_gold_reachable": len(reachable),
        "acc@1": accuracy[0], "acc@1_reachable": over_reachable[0], "acc@5": accuracy[4], "acc@k": accuracy,
        "dictionary_concepts": len(task.dictionary), "dictionary_names": task.dictionary.n_names,
        "mentions_per_s": len(texts) / seconds if seconds else None,
        "build_seconds": system.build_seconds,
    }


def _follow_parentheticals(task: Task, asked: List[List[str]], scored: dict, rankings: list) -> list:
    """The rankings after each document's parenthetical pairs share the surer one's ranking
    (mentions.parenthetical); a composite query neither gives nor takes one."""
    from spacy_sapbert.mentions.parenthetical import share_parentheticals

    by_doc: dict = {}
    for i, query in enumerate(task.queries):
        by_doc.setdefault(query.mention.doc_id, []).append(i)
    rankings = list(rankings)
    for doc_id, indexes in by_doc.items():
        if doc_id not in task.documents:
            continue
        mentions = [task.queries[i].mention for i in indexes]
        top = [scored[asked[i][0]][0][1] if len(asked[i]) == 1 and scored[asked[i][0]] else None for i in indexes]
        placed = [(m.start, m.end, m.text) for m in mentions]
        shared = share_parentheticals(task.documents[doc_id], placed, [rankings[i] for i in indexes], top)
        for i, ranking in zip(indexes, shared):
            rankings[i] = ranking
    return rankings


def part_windows(task: Task, window: int) -> List[List[str]]:
    """Each query's parts as a model trained on contexts is asked them, as the pipe asks: in
    the window of the mention's sentence (encoders.base.in_window over spacy_sapbert_training.data.contexts' tokens and
    sentences), the part in place of the mention; a mention without its document (CADEC's) in
    an empty window."""
    from spacy_sapbert.encoders.base import MENTION_END, MENTION_START, context_nlp, in_window

    nlp = context_nlp()
    wanted = sorted({q.mention.doc_id for q in task.queries if q.mention.doc_id in task.documents})
    docs = dict(zip(wanted, nlp.pipe(task.documents[d] for d in wanted)))
    asked = []
    for query in task.queries:
        doc = docs.get(query.mention.doc_id)
        span = doc.char_span(query.mention.start, query.mention.end, alignment_mode="expand") if doc else None
        asked.append([in_window(doc, span.start, span.end, window, part) if span is not None
                      else f"{MENTION_START} {part} {MENTION_END}" for part in query.parts])
    return asked


def _vector_space(model: Optional[str]) -> EncoderSystem:
    """The model system without a dictionary of its own, for measures of its vectors alone."""
    return EncoderSystem(KnowledgeBase([Concept("x", "x")]), model or "default")


def evaluate_relatedness(dataset: str, data_dir: Path, system: str, model: Optional[str]) -> dict:
    """Spearman correlation between the system's cosine similarities and the ratings."""
    from scipy.stats import spearmanr

    path, reader = ds.RELATEDNESS_FILES[dataset]
    pairs = reader(data_dir / path)
    first, second = [p.term1 for p in pairs], [p.term2 for p in pairs]
    if system == "model":
        encoder = _vector_space(model)
        similarity = encoder.similarity(first, second)
    elif system == "tfidf":
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3)).fit(first + second)
        similarity = vectorizer.transform(first).multiply(vectorizer.transform(second)).sum(1).A1
    else:
        raise ValueError(f"Relatedness needs a similarity; system {system!r} has none (use model or tfidf).")
    return {"n": len(pairs), "spearman": float(spearmanr(similarity, [p.score for p in pairs]).correlation)}


def evaluate_conceptual(dataset: str, system: str, model: Optional[str]) -> dict:
    """MCSM per type group (k = 40, at most 11.09), or the synonym-pair F1 (θ chosen on the dev
    half of the KB's concepts, F1 on the held-apart half), for the model's vector space."""
    from spacy_sapbert.kb.bundled import default_kb

    from . import conceptual

    if system != "model":
        raise ValueError(f"{dataset} measures a model's vector space; use --system model, not {system!r}.")
    kb, _ = default_kb()
    encoder = _vector_space(model)
    if dataset == "mcsm":
        concepts = list(kb)
        vectors = encoder.query_encoder.encode([c.canonical_name for c in concepts], show_progress=True)
        scores = conceptual.mcsm(vectors, conceptual.concept_groups(concepts))
        return {"n": len(concepts), "k": conceptual.MCSM_K, "max": conceptual.mcsm_max(),
                **{f"mcsm_{group}": score for group, score in scores.items()}}
    halves = conceptual.synonym_pairs(kb)
    found = {}
    for half, pairs in halves.items():
        similarity = encoder.similarity([a for a, _, _ in pairs], [b for _, b, _ in pairs])
        found[half] = (similarity, np.array([same for _, _, same in pairs]))
    threshold, dev_f1 = conceptual.best_threshold(*found[0])
    return {"n": len(halves[1]), "threshold": threshold, "dev_f1": dev_f1,
            "pair_f1": conceptual.pair_f1(found[1][0], found[1][1], threshold)}


def run(dataset: str, split: str, system: str, protocol: str, data_dir: Path,
        model: Optional[str] = None, fold: int = 0, precision: str = "fp32", index_type: str = "flat",
        training_precedence: bool = True, sparse_weight: Optional[float] = None,
        names_precision: str = "fp32", marginal_tau: Optional[float] = None, parentheticals: bool = True,
        vocabulary: Sequence[str] = ds.DEFAULT_VOCABULARY) -> dict:
    """One evaluation; the metrics as a dict. parentheticals: the model links chemicals with the
    pipe's parenthetical rule (False measures without it); vocabulary: the chemical dictionary's
    sources (datasets.base_dictionary)."""
    if split == TRAIN_FOLD and dataset not in ds.PUBTATOR_FILES:
        raise ValueError(f"--split {TRAIN_FOLD} folds the train documents of {', '.join(ds.PUBTATOR_FILES)}; "
                         f"{dataset} has folds of its own (--fold).")
    shown_split = f"{TRAIN_FOLD}{fold}" if split == TRAIN_FOLD else split
    header = {"dataset": dataset, "split": shown_split if dataset != "cadec" else f"fold{fold}-test",
              "system": system, "protocol": protocol, "model": model if system == "model" else None}
    if system == "model" and (precision, index_type) != ("fp32", "flat"):
        header.update(precision=precision, index_type=index_type)
    if system == "model" and names_precision != "fp32":
        header["names_precision"] = names_precision
    if dataset in RELATEDNESS_DATASETS:
        return {**header, "protocol": "cosine", **evaluate_relatedness(dataset, data_dir, system, model)}
    if dataset in CONCEPTUAL_DATASETS:
        return {**header, "split": "kb", "protocol": "cosine", **evaluate_conceptual(dataset, system, model)}
    if not training_precedence:
        header["training_precedence"] = False
    header.update(_scoring(sparse_weight, marginal_tau))
    task = prepare(dataset, split, protocol, data_dir, fold, training_precedence, vocabulary)
    system_ = make_system(system, task.dictionary, model, precision, index_type, sparse_weight, names_precision,
                          marginal_tau)
    # The pipe's parenthetical rule is for chemicals (its default parenthetical_labels).
    rule_applies = system == "model" and dataset in PARENTHETICAL_DATASETS
    if rule_applies and not parentheticals:
        header["parentheticals"] = False
    if vocabulary != ds.DEFAULT_VOCABULARY and dataset == "bc5cdr-chemical":
        header["vocabulary"] = list(vocabulary)
    return {**header, **evaluate_linking(task, system_, rule_applies and parentheticals)}


def run_train_folds(dataset: str, **settings) -> dict:
    """`run` on each train fold (TRAIN_FOLDS, by document): each fold's metrics, and the mean and
    the spread (sample standard deviation) of its Acc@1 and Acc@1 over reachable queries, the
    yardstick a rule or setting must clear before dev is read."""
    folds = [run(dataset, TRAIN_FOLD, fold=fold, **settings) for fold in range(TRAIN_FOLDS)]
    summary = {"dataset": dataset, "split": "train-folds", "folds": folds}
    for key in ("acc@1", "acc@1_reachable"):
        values = [fold[key] for fold in folds]
        summary[f"{key}_mean"], summary[f"{key}_sd"] = statistics.mean(values), statistics.stdev(values)
    return summary


def _scoring(sparse_weight: Optional[float], marginal_tau: Optional[float]) -> dict:
    """The pipe's scoring keys a run sets (None: the model's own), as its config takes them."""
    return {key: value for key, value in (("sparse_weight", sparse_weight), ("marginal_tau", marginal_tau))
            if value is not None}


class Dataset(str, Enum):
    ncbi = "ncbi-disease"
    bc5cdr_disease = "bc5cdr-disease"
    bc5cdr_chemical = "bc5cdr-chemical"
    cadec = "cadec"
    mayosrs = "mayosrs"
    umnsrs = "umnsrs"
    mcsm = "mcsm"
    synonym_pairs = "synonym-pairs"


class Split(str, Enum):
    dev = "dev"
    test = "test"
    train_fold = TRAIN_FOLD
    train_folds = "train-folds"


# --system: the registered systems as a choice.
System = Enum("System", {name: name for name in systems.get_all()}, type=str)


class Protocol(str, Enum):
    standard = "standard"
    lenient = "lenient"


def evaluate_command(
    dataset: Dataset = typer.Option(..., "--dataset", help="Benchmark to evaluate on."),
    split: Split = typer.Option(Split.dev, "--split", help="dev; test when you have the test files; train-fold (--fold 0-4: "
                                "a fifth of the train documents against the rest), or train-folds (all five: mean and spread)."),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="Folder laid out as ../shared/data."),
    system: System = typer.Option(System.model, "--system", help="Which linker to evaluate."),
    model: str = typer.Option("default", "--model", help="Model directory or name (system model)."),
    protocol: Protocol = typer.Option(Protocol.standard, "--protocol", help="standard (papers) or lenient (raw mentions)."),
    fold: int = typer.Option(0, "--fold", help="CADEC fold, or the train fold of --split train-fold."),
    precision: str = typer.Option("int8", "--precision", help="Mention encoding (system model): int8 (ONNX, as the pipe and `link` encode), or fp32."),
    index_type: str = typer.Option("flat", "--index-type", help="FAISS index over the dictionary (system model)."),
    names_precision: str = typer.Option(
        "fp32", "--names-precision", help="Name encoding (system model): fp32 (exact), or int8, as build-index "
        "--precision int8 embeds a KB: 5x faster for big dictionaries (BC5CDR-chemical's 542k names)."),
    training_precedence: bool = typer.Option(True, "--training-precedence/--no-training-precedence", help="Leave a name the "
                                             "training mentions give a concept to it (ties then follow the corpus, not row order)."),
    sparse_weight: Optional[float] = typer.Option(
        None, "--sparse-weight", help="Hybrid score: dense + this × char 3-gram tf-idf (system model); "
        "default: the weight the model was trained with, else 0 (dense only).",
    ),
    marginal_tau: Optional[float] = typer.Option(
        None, "--marginal-tau", help="Rank concepts by their synonym-marginal score at this tau (system model); "
        "default: the tau the model was trained with, else 0 (each concept by its best name).",
    ),
    parentheticals: bool = typer.Option(True, "--parentheticals/--no-parentheticals", help="BC5CDR-chemical, system "
                                        "model: a name in parentheses takes the ranking of the name before it, as the pipe links chemicals."),
    vocabulary: str = typer.Option(",".join(ds.DEFAULT_VOCABULARY), "--vocabulary", help="BC5CDR-chemical: the dictionary's "
                                   f"extra name sources, comma-separated, of {', '.join(ds.VOCABULARY_SOURCES)} ('' for MeSH alone)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the metrics JSON here."),
    end_to_end: bool = typer.Option(
        False, "--end-to-end", help="Run the bundled NER, abbreviations and sapbert_linker (--model, --precision, "
        "--sparse-weight, --marginal-tau, --index) over whole documents (BC5CDR's both labels with either bc5cdr dataset; NCBI-disease's diseases) and score spans and links per label.",
    ),
    gold_spans: bool = typer.Option(
        False, "--gold-spans", help="With --end-to-end: the gold spans instead of the NER's, so that the pipe's own "
        "Acc@1 per label is measured (all linkable mentions and those whose gold the index holds)."),
    index: str = typer.Option("default", "--index", help="--end-to-end: the linker's index (default, a knowledge base by name such as mesh, or an index directory)."),
    names: Optional[Path] = typer.Option(None, "--names", help="--end-to-end: a names table the linker adds to its index's "
                                         "names (index.names; python -m spacy_sapbert_training.data.names writes one from a corpus); gold ids are read "
                                         "through its older ids too."),
    shipped_names: bool = typer.Option(True, "--shipped-names/--no-shipped-names", help="--end-to-end: read the "
                                       "names table the index ships (index.shipped_names); the bundled one holds "
                                       "NCBI-disease's and BC5CDR's train and dev names, so leave it out to score dev."),
    scheme: str = typer.Option("auto", "--scheme", help="--end-to-end: the ids answers are given in (index.scheme): "
                               "auto (what the index records), '' (each concept's own), or id patterns, comma-separated."),
    ner: Optional[str] = typer.Option(None, "--ner", help="--end-to-end: a spaCy pipeline whose NER sets doc.ents, not the bundled one."),
    drop_unlinked: Optional[bool] = typer.Option(None, "--drop-unlinked/--keep-unlinked", help="--end-to-end: drop the entities the linker leaves NIL (default: with the bundled NER only)."),
    repeated_entities: Optional[bool] = typer.Option(None, "--repeated-entities/--no-repeated-entities", help="--end-to-end: tag an entity's text again where the document repeats it (default: with the bundled NER only)."),
):
    """Evaluate a linker on a benchmark in the papers' protocol; print a table, write JSON."""
    if end_to_end:
        _end_to_end_command(dataset.value, split.value, data_dir, model, precision, _scoring(sparse_weight, marginal_tau), output,
                            index, gold_spans, fold, names, {"shipped_names": shipped_names, "scheme": scheme}, ner,
                            {"drop_unlinked": drop_unlinked, "repeated_entities": repeated_entities})
        return
    settings = dict(system=system.value, protocol=protocol.value, data_dir=data_dir, model=model, precision=precision,
                    index_type=index_type, training_precedence=training_precedence, sparse_weight=sparse_weight,
                    names_precision=names_precision, marginal_tau=marginal_tau, parentheticals=parentheticals,
                    vocabulary=tuple(v.strip() for v in vocabulary.split(",") if v.strip()))
    _linking_command(dataset.value, split.value, fold, settings, output)


def _linking_command(dataset: str, split: str, fold: int, settings: dict, output: Optional[Path]) -> None:
    try:
        if split == Split.train_folds.value:
            metrics = run_train_folds(dataset, **settings)
        else:
            metrics = run(dataset, split, fold=fold, **settings)
    except (ValueError, FileNotFoundError) as err:
        msg.fail(str(err))
        raise typer.Exit(1)
    shown = [(key, f"{value:.4f}" if isinstance(value, float) else value)
             for key, value in metrics.items() if key not in ("acc@k", "folds")]
    msg.table(shown, divider=True)
    _write(metrics, output)


def _end_to_end_command(dataset: str, split: str, data_dir: Path, model: str, precision: str,
                        config: dict, output: Optional[Path], index: str = "default", gold_spans: bool = False,
                        fold: int = 0, names: Optional[Path] = None, index_config: Optional[dict] = None,
                        ner: Optional[str] = None, entity_rules: Optional[dict] = None) -> None:
    from spacy_sapbert.pipe.bundled import demo_pipeline

    from .end_to_end import LABELS, corpus_of, evaluate_end_to_end, evaluate_gold_spans

    if dataset not in LABELS:
        msg.fail(f"--end-to-end scores whole documents of BC5CDR or NCBI-disease; use --dataset "
                 f"{', '.join(LABELS)}, not {dataset}.")
        raise typer.Exit(1)
    if split == Split.train_folds.value:
        msg.fail("--end-to-end reads one split; give --split train-fold --fold N for a fifth of train.")
        raise typer.Exit(1)
    try:
        # drop_unlinked, repeated_entities: where not given, as the bundled pipeline sets them (with its own NER only)
        config = {**config, **{key: value for key, value in (entity_rules or {}).items() if value is not None}}
        nlp = demo_pipeline(ner=ner, model=model, index=index, linker_config=config, encoder_config={"precision": precision},
                            names=str(names) if names is not None else None, index_config=index_config)
        evaluate = evaluate_gold_spans if gold_spans else evaluate_end_to_end
        shown = f"{TRAIN_FOLD}{fold}" if split == TRAIN_FOLD else split
        metrics = {"model": model, "precision": precision, "index": index, "names": str(names) if names else None,
                   "ner": ner or "bundled",
                   **(index_config or {}),
                   **evaluate(nlp, split, data_dir, fold=fold, corpus=corpus_of(dataset)), "split": shown}
    except (ValueError, FileNotFoundError) as err:
        msg.fail(str(err))
        raise typer.Exit(1)
    if gold_spans:
        rows = [(label, m["n"], f"{m['acc@1']:.4f}", f"{m['linked_right']:.4f}", m["n_reachable"],
                 f"{m['acc@1_reachable']:.4f}") for label, m in metrics.items() if label in ("disease", "chemical")]
        msg.table(rows, header=("gold spans", "n", "Acc@1", "linked right", "n reachable", "Acc@1 reachable"),
                  divider=True)
        _write(metrics, output)
        return
    rows = [(f"{kind} {label}", f"{m['precision']:.3f}", f"{m['recall']:.3f}", f"{m['f1']:.3f}")
            for kind in ("span", "link", "nil") for label, m in metrics[kind].items()]
    msg.table(rows, header=("", "P", "R", "F1"), divider=True)
    _write(metrics, output)


def _write(metrics: dict, output: Optional[Path]) -> None:
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(metrics, indent=2) + "\n")
        msg.good(f"Wrote {output}")
