"""Contextual mentions (CL+KGE): ontology names found in running text, each kept with a window
of its sentence's tokens and wrapped in [Ms] … [Me] markers, paired with a synonym of its concept.

The paper matched names over a 36M-word corpus; the text we may read is the train splits'
abstracts (NCBI-disease and BC5CDR train). A name matches case-insensitively on whole spaCy
tokens (PhraseMatcher on LOWER); overlapping matches keep the longest. Each match gives the
pairs `cui||LEFT [Ms] MENTION [Me] RIGHT||SYNONYM`, with `window` tokens of its sentence in all
(the mention's and as many each side as fit; encoders.base.in_window, which the pipe's sentence mode
and the harness use too), for the pair trainer.

    python -m spacy_sapbert_training.data.contexts corpus/linking_kb.jsonl --output corpus/context_pairs.txt.gz
"""
import random
from pathlib import Path
from typing import Iterable, Iterator, List, Sequence, Tuple

import typer
from wasabi import msg

from spacy_sapbert.encoders.base import context_nlp, in_window
from spacy_sapbert.kb.concepts import KnowledgeBase

from .pairs import Pair, distinct_names, write_pairs

WINDOW = 32


def name_matcher(nlp, kb: KnowledgeBase, min_length: int = 4):
    """A PhraseMatcher (on LOWER) of every name of `kb` of at least `min_length` characters, its
    match ids resolving to concept ids; a name of several concepts matches for each."""
    from spacy.matcher import PhraseMatcher

    matcher = PhraseMatcher(nlp.vocab, attr="LOWER")
    for concept in kb:
        names = [n for n in distinct_names(concept) if len(n) >= min_length]
        if names:
            matcher.add(concept.concept_id, list(nlp.tokenizer.pipe(names)))
    return matcher


def contexts(nlp, matcher, texts: Iterable[str], window: int = WINDOW) -> Iterator[Tuple[str, str]]:
    """(concept id, text in its window) for every longest name match in `texts`."""
    from spacy.util import filter_spans

    for doc in nlp.pipe(texts):
        by_span = {}
        for match_id, start, end in matcher(doc):
            by_span.setdefault((start, end), []).append(nlp.vocab.strings[match_id])
        for span in filter_spans([doc[s:e] for s, e in by_span]):
            for concept_id in sorted(by_span[(span.start, span.end)]):
                yield concept_id, in_window(doc, span.start, span.end, window)


def context_pairs(found: Iterable[Tuple[str, str]], kb: KnowledgeBase, synonyms: int = 2, seed: int = 0,
                  per_concept: int = 0) -> List[Pair]:
    """Each context paired with up to `synonyms` names of its concept (seeded); with
    `per_concept`, at most that many contexts of a concept, drawn at random (seeded)."""
    rng = random.Random(seed)
    found = list(found)
    if per_concept:
        by_concept = {}
        for row, (concept_id, _) in enumerate(found):
            by_concept.setdefault(concept_id, []).append(row)
        kept = {row for rows in by_concept.values() for row in rng.sample(rows, min(per_concept, len(rows)))}
        found = [pair for row, pair in enumerate(found) if row in kept]
    pairs = []
    for concept_id, context in found:
        names = distinct_names(kb.cui_to_entity[concept_id])
        for name in rng.sample(names, min(synonyms, len(names))):
            pairs.append((concept_id, context, name))
    return pairs


def train_abstracts(data_dir: Path, datasets: Sequence[str] = ("ncbi-disease", "bc5cdr-disease")) -> List[str]:
    """The train splits' documents (title and abstract): the text this project may match in."""
    from .datasets import load_pubtator_split

    return [doc.text for dataset in datasets for doc in load_pubtator_split(dataset, "train", data_dir).documents]


def main(
    kb_path: Path = typer.Argument(..., help="The KB whose names are matched (KB JSONL)."),
    output: Path = typer.Option(..., "--output", help="Pairs file to write (.gz to compress)."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data."),
    window: int = typer.Option(WINDOW, "--window", help="Tokens in a context, the mention's included."),
    synonyms: int = typer.Option(2, "--synonyms", help="Synonyms paired with each context."),
    per_concept: int = typer.Option(
        20, "--per-concept", help="At most this many contexts of a concept (0: all): the bundled KB names "
        "\"protein\", \"disease\" and \"common\", which would otherwise give a tenth of the contexts."),
    seed: int = typer.Option(0, "--seed"),
):
    """Write context pairs: names found in the train abstracts, in their windows, with synonyms."""
    from spacy_sapbert.kb.formats import read_jsonl

    from .datasets import DEFAULT_DATA_DIR

    kb = read_jsonl(kb_path)
    nlp = context_nlp()
    found = list(contexts(nlp, name_matcher(nlp, kb), train_abstracts(data_dir or DEFAULT_DATA_DIR), window))
    pairs = context_pairs(found, kb, synonyms, seed, per_concept)
    write_pairs(pairs, output)
    kept = len({pair[1] for pair in pairs})
    msg.good(f"Wrote {len(pairs)} pairs of {kept} contexts (of {len(found)} found) of {len({c for c, _ in found})} "
             f"concepts to {output}")


if __name__ == "__main__":
    typer.run(main)
