"""A small spaCy NER for Disease and Chemical mentions, trained on BC5CDR: the corpus in
spaCy's binary format for `spacy train configs/ner.cfg`.

    python -m spacy_sapbert.training.ner convert --output-dir corpus/ner
"""
import logging
import shutil
from pathlib import Path
from typing import List, Optional, Tuple

import spacy
import typer
from spacy.tokens import Doc, DocBin
from wasabi import msg

from spacy_sapbert.pipe.bundled import DEMO_NER
from spacy_sapbert.pipe.tokenization import biomedical_tokens

from .data.datasets import Corpus, read_pubtator
from .data.tally import Tally

logger = logging.getLogger(__name__)

BC5CDR_FILES = {"train": "CDR_TrainingSet.PubTator.txt", "dev": "CDR_DevelopmentSet.PubTator.txt"}
LABELS = ("Disease", "Chemical")


class ConversionStats(Tally):
    """What corpus_docs did: documents, mentions, exact, expanded, overlapping."""

    def summary(self) -> str:
        return (
            f"{self.documents} documents, {self.mentions} mentions: {self.exact} on token boundaries, "
            f"{self.expanded} widened to the tokens that hold them, {self.overlapping} left out as "
            "overlapping another mention."
        )


def corpus_docs(corpus: Corpus, nlp, stats: ConversionStats) -> List[Doc]:
    """One Doc per document with the gold mentions as entities.

    A mention that does not fall on token boundaries is widened to whole tokens (spaCy's
    "expand"), so no mention is lost silently; overlapping mentions (rare in BC5CDR) keep the
    first and are counted.
    """
    docs = []
    for document in corpus.documents:
        doc = nlp.make_doc(document.text)
        spans, taken = [], set()
        for mention in sorted(document.mentions, key=lambda m: (m.start, -m.end)):
            if mention.type not in LABELS:
                continue
            stats.mentions += 1
            span = doc.char_span(mention.start, mention.end, label=mention.type)
            if span is None:
                span = doc.char_span(mention.start, mention.end, label=mention.type, alignment_mode="expand")
                stats.expanded += 1
            else:
                stats.exact += 1
            if span is None or taken.intersection(range(span.start, span.end)):
                stats.overlapping += 1
                continue
            taken.update(range(span.start, span.end))
            spans.append(span)
        doc.ents = spans
        docs.append(doc)
        stats.documents += 1
    return docs


def convert(data_dir: Path, output_dir: Path) -> List[Tuple[str, ConversionStats]]:
    """Write train.spacy and dev.spacy from BC5CDR's PubTator files."""
    # The tokens the NER trains on: its config's before_init gives its own tokenizer the same rules.
    nlp = biomedical_tokens(spacy.blank("en"))
    output_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for split, filename in BC5CDR_FILES.items():
        stats = ConversionStats()
        # Unlinkable mentions (-1) are still mentions: NER keeps them.
        corpus = read_pubtator(data_dir / "bc5cdr" / filename, keep_unlinkable=True)
        DocBin(docs=corpus_docs(corpus, nlp, stats)).to_disk(output_dir / f"{split}.spacy")
        results.append((split, stats))
    return results


app = typer.Typer(add_completion=False, help=__doc__.splitlines()[0])


@app.callback()
def main():
    """Corpus preparation for the demo NER (a command group, so more steps can join)."""


@app.command("convert")
def convert_command(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data (its default)."),
    output_dir: Path = typer.Option(..., "--output-dir", help="Where train.spacy and dev.spacy go; keep it out of the repository."),
):
    """Convert BC5CDR train and dev for `spacy train`."""
    from .data.datasets import DEFAULT_DATA_DIR

    try:
        results = convert(data_dir or DEFAULT_DATA_DIR, output_dir)
    except (ValueError, FileNotFoundError) as err:
        msg.fail(str(err), exits=1)
    for split, stats in results:
        msg.good(f"{split}: {stats.summary()}")


@app.command("bundle")
def bundle_command(
    model: Path = typer.Argument(..., help="A trained pipeline, such as runs/ner/model-best."),
    output: Path = typer.Option(DEMO_NER, "--output", help="Where the demo looks for it (the package's assets/ner)."),
):
    """Copy a trained NER into the package, where `spacy-sapbert link` and `make demo` find it."""
    try:
        nlp = spacy.load(model)
    except (OSError, ValueError) as err:
        msg.fail(f"{model} is not a spaCy pipeline ({str(err).splitlines()[0]}); train it with `spacy project run ner`.", exits=1)
    if "ner" not in nlp.pipe_names:
        msg.fail(f"{model} has no ner pipe; the demo needs one that sets doc.ents.", exits=1)
    nlp.meta["name"] = "sapbert_demo_ner"
    # Training leaves every corpus token in the string store; the model needs none of them
    # (its embeddings hash the features), so only a blank pipeline's strings and the labels
    # are kept and no list of corpus words ships with the package.
    keep = set(spacy.blank(nlp.lang).vocab.strings) | set(nlp.get_pipe("ner").labels)
    nlp.vocab.strings._reset_and_load(sorted(keep))
    if output.exists():
        shutil.rmtree(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    scores = nlp.meta.get("performance", {})
    msg.good(f"Bundled {model} into {output} (dev F1 {100 * scores.get('ents_f', 0):.1f}).")


if __name__ == "__main__":
    app()
