"""The realistic protocol: what a user of the shipped pipeline gets on text it has never seen.

The pipe (abbreviation detector + `sapbert_linker` with its index, the NER left out) links the
gold spans of whole documents (end_to_end.evaluate_gold_spans), and nothing of the scored
documents is in its index. Three settings of the names table the linker adds to its index
(`index.names`; the index's own shipped table is always left out here):

- ontology: no table: the ontology's names alone (BELB's setting, where systems learn a corpus's
  train split by training only).
- names: the names the public annotations give (training.data.names), from the scored corpus's
  other train folds (a train fold) or its train split (dev), and the other corpus's train split.
- cross: the other corpus's train names only: what carries to text annotated elsewhere.

    python -m spacy_sapbert_training.evaluation.realistic --splits train-folds,dev --output metrics/realistic

Per set (NCBI-disease, BC5CDR-disease, BC5CDR-chemical): Acc@1 per train fold, their mean and
sample standard deviation, and dev; over every linkable mention and over those whose gold the
index holds. The table's rules (TableRules) are options, so that they are chosen on the folds.
"""
import json
import logging
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Dict, List

import typer

from ..data import datasets as ds
from ..data.names import TableRules, corpus_names, index_kb, older_ids, write_names
from ..data.protocol import TRAIN_FOLD, TRAIN_FOLDS, train_fold
from .end_to_end import CORPORA, evaluate_gold_spans

logger = logging.getLogger(__name__)

SETTINGS = ("ontology", "names", "cross")
SETS = {"ncbi-disease": ("ncbi-disease", "disease"), "bc5cdr-disease": ("bc5cdr", "disease"),
        "bc5cdr-chemical": ("bc5cdr", "chemical")}


def table_mentions(corpus: str, setting: str, split: str, fold: int, data_dir: Path) -> List[ds.Mention]:
    """The mentions whose names the table of `setting` holds when `corpus`'s `split` (fold) is scored."""
    mentions: List[ds.Mention] = []
    for source, datasets in CORPORA.items():
        own = source == corpus
        if setting == "ontology" or (setting == "cross" and own):
            continue
        for dataset in datasets:
            train = ds.load_pubtator_split(dataset, "train", data_dir)
            mentions += train_fold(train, fold)[1] if own and split == TRAIN_FOLD else train.mentions
    return mentions


@lru_cache(maxsize=None)
def table_source(index: str):
    """The index's KB and its older-id reader (names.older_ids), read once for every table."""
    kb, types = index_kb(index)
    return kb, older_ids(kb, types)


def measure(corpus: str, setting: str, split: str, fold: int, data_dir: Path, model: str, index: str,
            rules: TableRules, tables: Path, scheme: str = "auto", supplement: bool = True) -> Dict[str, dict]:
    """The pipe's gold-span Acc@1 per label on `corpus`'s `split` (fold) with `setting`'s table."""
    from spacy_sapbert.pipe.bundled import demo_pipeline

    mentions = table_mentions(corpus, setting, split, fold, data_dir)
    names = None
    if mentions:
        kb, current = table_source(index)
        rows, _ = corpus_names(mentions, kb.resolve_id, current, rules)
        names = str(write_names(rows, tables / f"{corpus}-{split}{fold if split == TRAIN_FOLD else ''}-{setting}.tsv"))
    nlp = demo_pipeline(model=model, index=index, names=names, index_config={"shipped_names": False, "scheme": scheme,
                                                                                        "supplement": supplement})
    return evaluate_gold_spans(nlp, split, data_dir, fold=fold, corpus=corpus)


def summarise(runs: Dict[str, Dict[str, dict]]) -> Dict[str, dict]:
    """Per set and setting: each fold's and dev's Acc@1 (all, reachable), the folds' mean and sd."""
    summary: Dict[str, dict] = {}
    for key, by_corpus in runs.items():  # key: "setting/split"
        setting, split = key.split("/")
        for name, (corpus, label) in SETS.items():
            metrics = by_corpus.get(corpus, {})
            if not metrics:
                continue
            row = summary.setdefault(f"{name}/{setting}", {})
            values = [m[label] for m in metrics] if isinstance(metrics, list) else [metrics[label]]
            accs = [100 * v["acc@1"] for v in values]
            reach = [100 * v["acc@1_reachable"] for v in values]
            if split == "train-folds":
                row.update(folds=accs, mean=statistics.mean(accs), sd=statistics.stdev(accs) if len(accs) > 1 else 0.0,
                           folds_reachable=reach, mean_reachable=statistics.mean(reach))
            else:
                row.update(dev=accs[0], dev_reachable=reach[0], dev_n=values[0]["n"])
    return summary


def markdown(summary: Dict[str, dict]) -> str:
    """The summary as a table: set, setting, folds, mean ± sd, dev."""
    lines = ["| set | table | train folds, Acc@1 | mean ± sd | dev Acc@1 (reachable) |", "|---|---|---|---|---|"]
    for key, row in summary.items():
        name, setting = key.split("/")
        folds = " / ".join(f"{a:.2f}" for a in row.get("folds", []))
        spread = f"{row['mean']:.2f} ± {row['sd']:.2f}" if "mean" in row else ""
        dev = f"{row['dev']:.2f} ({row['dev_reachable']:.2f})" if "dev" in row else ""
        lines.append(f"| {name} | {setting} | {folds} | {spread} | {dev} |")
    return "\n".join(lines) + "\n"


def main(
    splits: str = typer.Option("train-folds,dev", help="train-folds (the five folds of train), dev, or both"),
    folds: str = typer.Option(",".join(map(str, range(TRAIN_FOLDS))), help="The train folds to score, comma-separated"),
    settings: str = typer.Option(",".join(SETTINGS), help=f"Names tables to measure: {', '.join(SETTINGS)}"),
    corpora: str = typer.Option(",".join(CORPORA), help="Corpora to score: ncbi-disease, bc5cdr"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
    model: str = typer.Option("default", help="The linker's model"),
    index: str = typer.Option("default", help="The linker's index"),
    min_count: int = typer.Option(1, help="Table rule: mentions a name must give a concept"),
    short_forms: bool = typer.Option(True, "--short-forms/--no-short-forms", help="Table rule: keep short forms"),
    ambiguous: str = typer.Option("keep", help="Table rule for a name given several concepts: keep, majority, drop"),
    composite: bool = typer.Option(True, "--composite/--no-composite", help="Table rule: a composite mention gives its name each of its concepts"),
    scheme: str = typer.Option("auto", help="The ids answers are given in (the linker's index.scheme)"),
    supplement: bool = typer.Option(True, "--supplement/--no-supplement", help="Search the index's supplement too (index.supplement)"),
    output: Path = typer.Option(Path("metrics/realistic"), help="Folder for realistic.json and realistic.md"),
    tables: Path = typer.Option(Path("corpus/names/realistic"), help="Folder for the tables (corpus mentions: keep out of git)"),
) -> None:
    """Measure the shipped pipe under the realistic protocol; write JSON and a Markdown table."""
    rules = TableRules(min_count=min_count, short_forms=short_forms, ambiguous=ambiguous, composite=composite)
    chosen = [c.strip() for c in corpora.split(",") if c.strip()]
    chosen_folds = [int(f) for f in folds.split(",") if f.strip()]
    runs: Dict[str, Dict[str, object]] = {}
    for split in [s.strip() for s in splits.split(",") if s.strip()]:
        for setting in [s.strip() for s in settings.split(",") if s.strip()]:
            for corpus in chosen:
                if split == "train-folds":
                    result: object = [measure(corpus, setting, TRAIN_FOLD, fold, data_dir, model, index, rules, tables,
                                              scheme, supplement)
                                      for fold in chosen_folds]
                else:
                    result = measure(corpus, setting, split, 0, data_dir, model, index, rules, tables, scheme, supplement)
                runs.setdefault(f"{setting}/{split}", {})[corpus] = result
                logger.info("%s %s %s done", setting, split, corpus)
    summary = summarise(runs)
    output.mkdir(parents=True, exist_ok=True)
    (output / "realistic.json").write_text(json.dumps({
        "rules": rules.__dict__, "model": model, "index": index, "scheme": scheme, "supplement": supplement,
        "summary": summary, "runs": runs}, indent=2) + "\n")
    table = markdown(summary)
    (output / "realistic.md").write_text(table)
    typer.echo(table)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    typer.run(main)
