"""A names table from an annotated corpus: the names its mentions give their concepts, as the
linker's `index.names` reads them (pipe.loaders.IndexLoader), so that a pipe links the corpus's
own conventions ("alcohol" as ethanol in BC5CDR) and its development codes as the standard
protocol's dictionary does with training mentions, without building the index again:

    python -m spacy_sapbert_training.data.names --datasets bc5cdr-chemical,bc5cdr-disease \
        --split train --index mesh --output corpus/names/bc5cdr-train.tsv
    python -m spacy_sapbert_training.data.names --pubtator my_corpus.txt --index mesh --output my_names.tsv

A mention's id must be a concept of the index (or another id of one), or read as an older id of
one (`older_ids`: an id of the index's scheme whose names here name one concept of it, as MeSH
made supplementary concepts descriptors); other mentions of concepts the index lacks are left
out and counted. A composite mention ("breast or ovarian cancer") gives its name each of its
concepts (TableRules.composite). The table holds corpus mentions:
keep it in an ignored folder (corpus/), never in git.
"""
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import typer

from spacy_sapbert.kb.concepts import KnowledgeBase, clean_name, exact_key

from . import datasets as ds
from .protocol import TRAIN_FOLD, train_fold


Row = Tuple[str, ...]  # (name, concept id) or, for an older id, (name, older id, current id)


@dataclass(frozen=True)
class TableRules:
    """Which of a corpus's names a table keeps.

    min_count: mentions a name must give a concept before the table gives it that concept.
    short_forms: keep names that read as short forms ("PD"; mentions.abbreviations.is_short_form),
        whose meaning a text defines; False leaves them to the abbreviation rules.
    ambiguous: a name given several concepts: "keep" lists them all (most mentions first),
        "majority" keeps the one most mentions give, "drop" leaves the name out.
    composite: a composite mention ("breast or ovarian cancer": several ids) gives its name each
        of its concepts the index holds, so that the name links to them where a text writes it
        again; False leaves composite mentions out.
    """

    min_count: int = 1
    short_forms: bool = True
    ambiguous: str = "keep"
    composite: bool = True

    def __post_init__(self) -> None:
        if self.ambiguous not in ("keep", "majority", "drop"):
            raise ValueError(f"ambiguous {self.ambiguous!r} is not one of keep, majority, drop.")

    def apply(self, given: Dict[str, Counter], written: Dict[str, str]) -> Dict[str, Counter]:
        """`given` (name key → Counter of id tuples) with these rules applied."""
        from spacy_sapbert.mentions.abbreviations import is_short_form

        kept: Dict[str, Counter] = {}
        for key, concepts in given.items():
            if not self.short_forms and is_short_form(written[key]):
                continue
            concepts = Counter({ids: n for ids, n in concepts.items() if n >= self.min_count})
            if len(concepts) > 1 and self.ambiguous == "drop":
                continue
            if len(concepts) > 1 and self.ambiguous == "majority":
                concepts = Counter(dict([min(concepts.items(), key=lambda item: (-item[1], item[0]))]))
            if concepts:
                kept[key] = concepts
        return kept


def corpus_names(mentions: Iterable[ds.Mention], resolve: Callable[[str], Optional[str]],
                 current: Optional[Callable[[str, str, Set[str]], Optional[str]]] = None,
                 rules: TableRules = TableRules()) -> Tuple[List[Row], Counter]:
    """(name, concept id) rows of the names `mentions` give their concepts: each mention's text
    (whitespace normalised) with its one gold id as `resolve` gives it (None: the index lacks
    it). A name given several concepts lists them most mentions first, then in id order; names
    that differ only in case, spacing and punctuation are one (as the linker compares them:
    kb.exact_key), written as first seen. An id the index lacks is kept as an older id where
    `current` (older_ids) gives, from its mentions' label and names, one index id for it: its
    rows are (name, older id, current id). A composite mention (several ids) gives its name
    each of its ids the index holds, where `rules` say so. Also the counts of mentions used (of
    them, by an older id), composite, and left out (not in the index). `rules` (TableRules)
    choose which names are kept."""
    counts: Counter = Counter()
    given: Dict[str, Counter] = defaultdict(Counter)
    written: Dict[str, str] = {}
    lacking: Dict[Tuple[str, str], Counter] = defaultdict(Counter)
    for mention in mentions:
        name = clean_name(mention.text)
        if len(mention.ids) != 1:
            counts["composite"] += 1
            parts = [concept for concept in map(resolve, mention.ids) if concept is not None] if rules.composite else []
            if parts:
                written.setdefault(exact_key(name), name)
            for concept in dict.fromkeys(parts):
                given[exact_key(name)][(concept,)] += 1
            continue
        written.setdefault(exact_key(name), name)
        concept = resolve(mention.ids[0])
        if concept is None:
            lacking[(mention.ids[0], mention.type)][exact_key(name)] += 1
            continue
        given[exact_key(name)][(concept,)] += 1
        counts["used"] += 1
    answers: Dict[str, Set[Optional[str]]] = defaultdict(set)  # one current id per older id, whatever its labels
    for (older, label), keys in lacking.items():
        answers[older].add(current(older, label, {written[key] for key in keys}) if current else None)
    for (older, label), keys in lacking.items():
        now = next(iter(answers[older])) if len(answers[older]) == 1 else None
        n_mentions = sum(keys.values())
        counts["used" if now else "not in the index"] += n_mentions
        counts["older ids"] += n_mentions if now else 0
        for key, n in keys.items() if now else ():
            given[key][(older, now)] += n
    given = rules.apply(given, written)
    rows = [(written[key], *ids) for key in sorted(given)
            for ids, _ in sorted(given[key].items(), key=lambda item: (-item[1], item[0]))]
    return rows, +counts


def _scheme(concept_id: str) -> str:
    """An id's scheme: its prefix ("OMIM", "MONDO"), or "" for a bare one (MeSH's "D012345")."""
    return concept_id.split(":", 1)[0] if ":" in concept_id else ""


def older_ids(kb: KnowledgeBase, label_types: Optional[Dict[str, List[str]]] = None
              ) -> Callable[[str, str, Set[str]], Optional[str]]:
    """How an id `kb` lacks, given by a corpus to mentions of one label, is read as one of its
    concepts' older ids: the id is of the scheme of `kb`'s own ids (not a cross-reference such as
    OMIM's beside MeSH) and, of the names the corpus gives it, those that are names of a concept
    the label may take (`label_types`, as the linker reads them: "BE" is not Barrett esophagus
    for a Chemical) all name one concept, whose id is returned, as MeSH's supplementary concepts
    made descriptors (C056507, now D000093542, "gemcitabine"); None where none or several
    concepts bear them. Short forms are not read (mentions.abbreviations.is_short_form): "IVA",
    the IVA protocol in one text, is isovaleric acidemia in MeSH."""
    from spacy_sapbert.mentions.abbreviations import is_short_form

    bearers: Dict[str, Set[int]] = defaultdict(set)
    concepts = list(kb)
    for position, concept in enumerate(concepts):
        for name in concept.names:
            bearers[exact_key(name)].add(position)
    schemes = {_scheme(concept.concept_id) for concept in concepts}
    types = {label.lower(): prefixes for label, prefixes in (label_types or {}).items()}

    def current(concept_id: str, label: str, names: Set[str]) -> Optional[str]:
        if _scheme(concept_id) not in schemes:
            return None
        prefixes = types.get(label.lower())
        found = {concepts[p].concept_id for name in names if not is_short_form(name)
                 for p in bearers.get(exact_key(name), ()) if prefixes is None or concepts[p].has_type(prefixes)}
        return next(iter(found)) if len(found) == 1 else None

    return current


def _with_supplement(kb: KnowledgeBase, folder: Path) -> KnowledgeBase:
    """`kb` with the concepts the supplement of the index at `folder` adds (search.supplement),
    so that an id the linker holds there is no older id."""
    from spacy_sapbert.search.supplement import SUPPLEMENT_DIR, supplement_concepts

    if not (folder / SUPPLEMENT_DIR / "meta.json").is_file():
        return kb
    added = supplement_concepts(folder / SUPPLEMENT_DIR, kb.cui_to_entity)
    return KnowledgeBase([*kb, *added], name=kb.name, version=kb.version)


def index_kb(index: str) -> Tuple[KnowledgeBase, Dict[str, List[str]]]:
    """The knowledge base of the index the linker's `index.index` names, without the index, and
    the entity label → concept type map the index keeps."""
    import json

    from spacy_sapbert.assets import BUNDLED_INDEX, DEFAULT, DEFAULT_EXACT
    from spacy_sapbert.kb.bundled import default_kb
    from spacy_sapbert.kb.formats import read_jsonl
    from spacy_sapbert.kb.named import is_named, label_types, named_kb
    from spacy_sapbert.search.index import KB_FILE, KB_FILE_GZ

    if index in (DEFAULT, DEFAULT_EXACT):
        kb, types = default_kb()
        return _with_supplement(kb, BUNDLED_INDEX), types
    if is_named(index):
        return named_kb(index), label_types(index)
    folder = Path(index).expanduser()
    for name in (KB_FILE_GZ, KB_FILE):
        if (folder / name).is_file():
            meta = folder / "meta.json"
            types = json.loads(meta.read_text(encoding="utf-8")).get("label_types", {}) if meta.is_file() else {}
            return _with_supplement(read_jsonl(folder / name), folder), types
    raise FileNotFoundError(f"{index} is neither default, a knowledge base by name nor an index directory with a "
                            f"{KB_FILE}.")


def write_names(rows: List[Row], path: Path, header: str = "") -> Path:
    """Write a names table (kb.formats.read_names reads it back), gzipped when `path` ends in
    .gz (with a fixed timestamp, so the same rows give the same bytes); `header`: comment lines."""
    from spacy_sapbert.kb.formats import open_text

    path.parent.mkdir(parents=True, exist_ok=True)
    with open_text(path, "w") as out:
        out.write("".join(f"# {line}\n" for line in header.splitlines()) + "".join("\t".join(row) + "\n" for row in rows))
    return path


def main(
    datasets: str = typer.Option("", help="Benchmarks whose mentions give the names, comma-separated (ncbi-disease, "
                                 "bc5cdr-disease, bc5cdr-chemical), read from --data-dir"),
    pubtator: List[Path] = typer.Option([], help="A PubTator file of your own whose mentions give names (repeatable)"),
    output: Path = typer.Option(..., help="The table to write (keep it out of git: it holds corpus mentions)"),
    index: str = typer.Option("mesh", help="The index whose concepts the ids must be: default (the bundled one), a "
                              "knowledge base by name (mesh, mondo, ...), or an index directory"),
    split: str = typer.Option("train", help="train, dev, both (train,dev), or train-fold (the documents outside --fold)"),
    fold: int = typer.Option(0, help="With --split train-fold: the fold whose documents are left out"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
    min_count: int = typer.Option(1, help="Mentions a name must give a concept before the table gives it"),
    short_forms: bool = typer.Option(True, "--short-forms/--no-short-forms", help="Keep names that read as short forms"),
    ambiguous: str = typer.Option("keep", help="A name given several concepts: keep (all, most mentions first), "
                                  "majority, or drop"),
    composite: bool = typer.Option(True, "--composite/--no-composite", help="A composite mention (several ids) gives its "
                                   "name each of its concepts; else composite mentions are left out"),
    header: str = typer.Option("", help="Comment lines to write first (what the table was made from)"),
) -> None:
    """Write the names a corpus's mentions give their concepts as a names table."""
    chosen = [d.strip() for d in datasets.split(",") if d.strip()]
    if not chosen and not pubtator:
        raise typer.BadParameter("give --datasets or --pubtator: the corpus whose mentions give the names.")
    unknown = [d for d in chosen if d not in ds.PUBTATOR_FILES]
    if unknown:
        raise typer.BadParameter(f"unknown dataset {unknown[0]!r}; use any of {', '.join(ds.PUBTATOR_FILES)}.")
    try:
        kb, types = index_kb(index)
        mentions: List[ds.Mention] = [m for path in pubtator for m in ds.read_pubtator(path).mentions]
        for dataset in chosen:
            for part in [p.strip() for p in split.split(",") if p.strip()]:
                if part == TRAIN_FOLD:
                    mentions += train_fold(ds.load_pubtator_split(dataset, "train", data_dir), fold)[1]
                else:
                    mentions += ds.load_pubtator_split(dataset, part, data_dir).mentions
        rules = TableRules(min_count=min_count, short_forms=short_forms, ambiguous=ambiguous, composite=composite)
    except (ValueError, FileNotFoundError) as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1)
    rows, counts = corpus_names(mentions, kb.resolve_id, older_ids(kb, types), rules)
    write_names(rows, output, header.replace("\\n", "\n"))
    typer.echo(f"{output}: {len(rows):,} names from {counts['used']:,} mentions, {counts['older ids']:,} of them by "
               f"an older id of a concept of the index ({counts['composite']:,} composite"
               f"{', each id a name' if composite else ' left out'}; left out: "
               f"{counts['not in the index']:,} of concepts the {index} index lacks)")


if __name__ == "__main__":
    typer.run(main)
