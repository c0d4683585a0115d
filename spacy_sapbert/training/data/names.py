"""A names table from an annotated corpus: the names its mentions give their concepts, as the
linker's `index.names` reads them (pipe.loaders.IndexLoader), so that a pipe links the corpus's
own conventions ("alcohol" as ethanol in BC5CDR) and its development codes as the standard
protocol's dictionary does with training mentions, without building the index again:

    python -m spacy_sapbert.training.data.names --datasets bc5cdr-chemical,bc5cdr-disease \
        --split train --index mesh --output corpus/names/bc5cdr-train.tsv
    python -m spacy_sapbert.training.data.names --pubtator my_corpus.txt --index mesh --output my_names.tsv

A mention's id must be a concept of the index (or another id of one); mentions of concepts the
index lacks, and composite mentions, are left out and counted. The table holds corpus mentions:
keep it in an ignored folder (corpus/), never in git.
"""
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import typer

from spacy_sapbert.kb.concepts import KnowledgeBase, clean_name, exact_key

from . import datasets as ds
from .protocol import TRAIN_FOLD, train_fold


def corpus_names(mentions: Iterable[ds.Mention],
                 resolve: Callable[[str], Optional[str]]) -> Tuple[List[Tuple[str, str]], Counter]:
    """(name, concept id) rows of the names `mentions` give their concepts: each mention's text
    (whitespace normalised) with its one gold id as `resolve` gives it (None: the index lacks
    it). A name given several concepts lists them most mentions first, then in id order; names
    that differ only in case, spacing and punctuation are one (as the linker compares them:
    kb.exact_key), written as first seen. Also the counts of
    mentions used and left out (composite, not in the index)."""
    counts: Counter = Counter()
    given: Dict[str, Counter] = defaultdict(Counter)
    written: Dict[str, str] = {}
    for mention in mentions:
        if len(mention.ids) != 1:
            counts["composite"] += 1
            continue
        concept = resolve(mention.ids[0])
        if concept is None:
            counts["not in the index"] += 1
            continue
        name = clean_name(mention.text)
        written.setdefault(exact_key(name), name)
        given[exact_key(name)][concept] += 1
        counts["used"] += 1
    rows = [(written[key], concept) for key in sorted(given)
            for concept, _ in sorted(given[key].items(), key=lambda item: (-item[1], item[0]))]
    return rows, counts


def index_kb(index: str) -> KnowledgeBase:
    """The knowledge base of the index the linker's `index.index` names, without the index."""
    from spacy_sapbert.assets import DEFAULT, DEFAULT_EXACT, default_kb
    from spacy_sapbert.kb.formats import read_jsonl
    from spacy_sapbert.kb.named import is_named, named_kb
    from spacy_sapbert.search.index import KB_FILE, KB_FILE_GZ

    if index in (DEFAULT, DEFAULT_EXACT):
        return default_kb()[0]
    if is_named(index):
        return named_kb(index)
    folder = Path(index).expanduser()
    for name in (KB_FILE_GZ, KB_FILE):
        if (folder / name).is_file():
            return read_jsonl(folder / name)
    raise FileNotFoundError(f"{index} is neither default, a knowledge base by name nor an index directory with a "
                            f"{KB_FILE}.")


def write_names(rows: List[Tuple[str, str]], path: Path) -> Path:
    """Write a names table (kb.formats.read_names reads it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}\t{concept}\n" for name, concept in rows), encoding="utf-8")
    return path


def main(
    datasets: str = typer.Option("", help="Benchmarks whose mentions give the names, comma-separated (ncbi-disease, "
                                 "bc5cdr-disease, bc5cdr-chemical), read from --data-dir"),
    pubtator: List[Path] = typer.Option([], help="A PubTator file of your own whose mentions give names (repeatable)"),
    output: Path = typer.Option(..., help="The table to write (keep it out of git: it holds corpus mentions)"),
    index: str = typer.Option("mesh", help="The index whose concepts the ids must be: default (the bundled one), a "
                              "knowledge base by name (mesh, mondo, ...), or an index directory"),
    split: str = typer.Option("train", help="train, dev, or train-fold (the documents outside --fold)"),
    fold: int = typer.Option(0, help="With --split train-fold: the fold whose documents are left out"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
) -> None:
    """Write the names a corpus's mentions give their concepts as a names table."""
    chosen = [d.strip() for d in datasets.split(",") if d.strip()]
    if not chosen and not pubtator:
        raise typer.BadParameter("give --datasets or --pubtator: the corpus whose mentions give the names.")
    unknown = [d for d in chosen if d not in ds.PUBTATOR_FILES]
    if unknown:
        raise typer.BadParameter(f"unknown dataset {unknown[0]!r}; use any of {', '.join(ds.PUBTATOR_FILES)}.")
    try:
        kb = index_kb(index)
        mentions: List[ds.Mention] = [m for path in pubtator for m in ds.read_pubtator(path).mentions]
        for dataset in chosen:
            if split == TRAIN_FOLD:
                mentions += train_fold(ds.load_pubtator_split(dataset, "train", data_dir), fold)[1]
            else:
                mentions += ds.load_pubtator_split(dataset, split, data_dir).mentions
    except (ValueError, FileNotFoundError) as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1)
    rows, counts = corpus_names(mentions, kb.resolve_id)
    write_names(rows, output)
    typer.echo(f"{output}: {len(rows):,} names from {counts['used']:,} mentions (left out: {counts['composite']:,} "
               f"composite, {counts['not in the index']:,} of concepts the {index} index lacks)")


if __name__ == "__main__":
    typer.run(main)
