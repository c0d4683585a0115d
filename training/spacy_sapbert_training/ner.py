"""The bundled NER for Disease and Chemical mentions, a spaCy tok2vec + NER trained on the train
splits of BC5CDR and NCBI-disease: the corpora in spaCy's binary format for `spacy train
configs/ner.cfg`.

The two corpora annotate differently: BC5CDR marks diseases and chemicals, NCBI-disease only
diseases. So in an NCBI-disease document the tokens of a chemical name the bundled index knows
(its MeSH D-tree names, case-insensitive; none inside a disease mention) are left missing: the
NER learns neither "chemical" nor "outside" from them; every other token outside a disease
mention is outside. Both corpora's diseases share one label. The NER reads, beside each word,
which tokens are names of the bundled index (`sapbert_gazetteer`, configs/ner.cfg), so the index
package must be installed where it is trained.

    python -m spacy_sapbert_training.ner convert --output-dir corpus/ner [--held-out-fold 0] [--replace-mentions 0.5]
"""
import json
import logging
import random
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import spacy
import typer
from spacy.tokens import Doc, DocBin
from wasabi import msg

from spacy_sapbert.pipe.bundled import DEMO_NER
from spacy_sapbert.pipe.gazetteer import CHEMICAL_TREES, SOURCES
from spacy_sapbert.pipe.tokenization import biomedical_tokens

from .data.datasets import Corpus, read_pubtator
from .data.tally import Tally

logger = logging.getLogger(__name__)

BC5CDR_FILES = {"train": "CDR_TrainingSet.PubTator.txt", "dev": "CDR_DevelopmentSet.PubTator.txt"}
NCBI_FILES = {"train": "NCBItrainset_corpus.txt", "dev": "NCBIdevelopset_corpus.txt"}
LABELS = ("Disease", "Chemical")
# Which labels each corpus annotates, and its files.
CORPORA = {"bc5cdr": (("Disease", "Chemical"), "bc5cdr", BC5CDR_FILES),
           "ncbi-disease": (("Disease",), "ncbi-disease", NCBI_FILES)}


class ConversionStats(Tally):
    """What corpus_docs did: documents, mentions, exact, expanded, overlapping, missing (spans of
    tokens left unannotated)."""

    def summary(self) -> str:
        return (
            f"{self.documents} documents, {self.mentions} mentions: {self.exact} on token boundaries, "
            f"{self.expanded} widened to the tokens that hold them, {self.overlapping} left out as "
            f"overlapping another mention; {self.missing} chemical names left unannotated."
        )


def chemical_matcher(nlp):
    """A PhraseMatcher (lower case) of the bundled index's chemical names (CHEMICAL_TREES), of
    four characters or more, for the chemicals a disease-only corpus leaves unmarked."""
    from spacy.matcher import PhraseMatcher

    from spacy_sapbert.kb.bundled import default_kb

    kb, _ = default_kb()
    names = {name.lower() for concept in kb if concept.has_type(CHEMICAL_TREES)
             for name in concept.names if len(name) >= 4 and ", " not in name}
    matcher = PhraseMatcher(nlp.vocab, attr="LOWER")
    matcher.add("Chemical", list(nlp.tokenizer.pipe(sorted(names))))
    return matcher


def corpus_docs(corpus: Corpus, nlp, stats: ConversionStats, labels: Tuple[str, ...] = LABELS,
                unmarked=None) -> List[Doc]:
    """One Doc per document with the gold mentions of `labels` as entities.

    A mention that does not fall on token boundaries is widened to whole tokens (spaCy's
    "expand"), so no mention is lost silently; overlapping mentions (rare in BC5CDR) keep the
    first and are counted. unmarked: a matcher whose matches outside the mentions are left
    missing (a corpus's unannotated label).
    """
    docs = []
    for document in corpus.documents:
        doc = nlp.make_doc(document.text)
        spans, taken = [], set()
        for mention in sorted(document.mentions, key=lambda m: (m.start, -m.end)):
            # A one-label corpus's mention classes (NCBI's SpecificDisease, Modifier, …) are that label.
            label = labels[0] if len(labels) == 1 else mention.type
            if label not in labels:
                continue
            stats.mentions += 1
            span = doc.char_span(mention.start, mention.end, label=label)
            if span is None:
                span = doc.char_span(mention.start, mention.end, label=label, alignment_mode="expand")
                stats.expanded += 1
            else:
                stats.exact += 1
            if span is None or taken.intersection(range(span.start, span.end)):
                stats.overlapping += 1
                continue
            taken.update(range(span.start, span.end))
            spans.append(span)
        missing = []
        if unmarked is not None:
            from spacy.util import filter_spans

            matches = filter_spans([doc[start:end] for _, start, end in unmarked(doc)])
            missing = [m for m in matches if not taken.intersection(range(m.start, m.end))]
            stats.missing += len(missing)
        doc.set_ents(spans, missing=missing, default="outside")
        docs.append(doc)
        stats.documents += 1
    return docs


def _words(tokens) -> Tuple[List[str], List[bool]]:
    """The texts of `tokens` (a Doc or Span) and whether each is followed by a space."""
    return [token.text for token in tokens], [bool(token.whitespace_) for token in tokens]


def name_pools(nlp, labels: Sequence[str]) -> Dict[str, List[Tuple[List[str], List[bool]]]]:
    """For each of `labels`, the bundled index's names a replaced mention of that label draws
    from, as nlp's tokens (words, spaces), the gazetteer's sources (pipe.gazetteer): diseases
    its disease names, chemicals its names of CHEMICAL_TREES; names of one to six words."""
    from spacy_sapbert.pipe.gazetteer import bundled_names

    # the gazetteer's source of each label's names: "disease", "chemical"
    source_of = {label: SOURCES.index(label.lower()) for label in LABELS}
    unknown = [label for label in labels if label not in source_of]
    if unknown:
        raise ValueError(f"--replace-labels names {', '.join(unknown)}; mentions of {', '.join(source_of)} can be replaced.")
    wanted = {source_of[label]: label for label in labels}
    texts: Dict[str, List[str]] = {label: [] for label in labels}
    for name, source in bundled_names():
        if source in wanted and 1 <= len(name.split()) <= 6:
            texts[wanted[source]].append(name)
    return {label: [_words(doc) for doc in nlp.tokenizer.pipe(sorted(names))] for label, names in texts.items()}


def replace_mentions(docs: Sequence[Doc], pools: Dict[str, List[Tuple[List[str], List[bool]]]],
                     probability: float, seed: int = 0) -> List[Doc]:
    """A copy of each document whose entities of the pools' labels are each replaced, with
    `probability`, by a name drawn from that label's pool (mention replacement): the NER sees
    the contexts of the corpus around names it never saw annotated, and learns more from the
    gazetteer's tags than from the words it memorised. Tokens left missing stay missing; the
    same seed gives the same copies."""
    rng = random.Random(seed)
    copies = []
    for doc in docs:
        words: List[str] = []
        spaces: List[bool] = []
        tags: List[Optional[str]] = []
        starts = {ent.start: ent for ent in doc.ents}
        i = 0
        while i < len(doc):
            ent = starts.get(i)
            if ent is None:
                token = doc[i]
                words.append(token.text)
                spaces.append(bool(token.whitespace_))
                tags.append("O" if token.ent_iob_ == "O" else None)
                i += 1
                continue
            if ent.label_ in pools and rng.random() < probability:
                new_words, new_spaces = rng.choice(pools[ent.label_])
                new_spaces = [*new_spaces[:-1], bool(doc[ent.end - 1].whitespace_)]
            else:
                new_words, new_spaces = _words(ent)
            words += new_words
            spaces += new_spaces
            tags += [f"B-{ent.label_}"] + [f"I-{ent.label_}"] * (len(new_words) - 1)
            i = ent.end
        copies.append(Doc(doc.vocab, words=words, spaces=spaces, ents=tags))
    return copies


def convert(data_dir: Path, output_dir: Path, corpora: Sequence[str] = ("bc5cdr",),
            held_out_fold: Optional[int] = None, replace: float = 0.0,
            replace_labels: Sequence[str] = ("Disease",), seed: int = 0,
            train_on_dev: bool = False, repeats: Optional[Dict[str, int]] = None) -> List[Tuple[str, ConversionStats]]:
    """Write train.spacy and dev.spacy from the corpora's PubTator files, and each corpus's
    dev documents apart (dev-CORPUS.spacy). held_out_fold: train.spacy holds the other train
    folds (protocol.train_fold's documents) and dev.spacy, dev-CORPUS.spacy that fold, where a
    recipe is chosen before dev is read. replace > 0: train.spacy also holds a copy of each train
    document whose mentions of `replace_labels` are replaced with that probability by the
    bundled index's names (replace_mentions). train_on_dev: train.spacy holds the dev documents
    too (the shipped model, once a recipe is chosen; dev can no longer score it). repeats: corpus
    → how many times its train documents stand in train.spacy (1 unless given)."""
    from .data.protocol import fold_split

    if not 0 <= replace <= 1:
        raise ValueError(f"--replace-mentions is {replace}; give a probability from 0 to 1.")
    # The tokens the NER trains on: its config's before_init gives its own tokenizer the same rules.
    nlp = biomedical_tokens(spacy.blank("en"))
    output_dir.mkdir(parents=True, exist_ok=True)
    matcher = None
    parts: Dict[str, List[Doc]] = {}
    results = []
    repeats = checked_repeats(repeats or {}, corpora)
    for corpus_name in corpora:
        if corpus_name not in CORPORA:
            raise ValueError(f"--corpora names {corpus_name!r}; the NER trains on {', '.join(CORPORA)}.")
        labels, folder, files = CORPORA[corpus_name]
        if "Chemical" not in labels and matcher is None:
            matcher = chemical_matcher(nlp)
        trains: List[Doc] = []  # this corpus's documents in train.spacy
        for split, filename in files.items():
            if held_out_fold is not None and split == "dev" and not train_on_dev:
                continue
            stats = ConversionStats()
            # Unlinkable mentions (-1) are still mentions: NER keeps them.
            corpus = read_pubtator(data_dir / folder / filename, keep_unlinkable=True)
            docs = corpus_docs(corpus, nlp, stats, labels, None if "Chemical" in labels else matcher)
            if split == "train" and held_out_fold is not None:
                # the held-out fold is the dev of a choice; dev's own documents can only train
                held, rest = fold_split(list(zip(corpus.documents, docs)), held_out_fold, key=lambda pair: pair[0].doc_id)
                trains += [doc for _, doc in rest]
                parts.setdefault("dev", []).extend(doc for _, doc in held)
                parts[f"dev-{corpus_name}"] = [doc for _, doc in held]
            elif split == "train" or train_on_dev:
                trains += docs
            if split == "dev" and held_out_fold is None:
                parts.setdefault("dev", []).extend(docs)
                parts[f"dev-{corpus_name}"] = docs
            results.append((f"{corpus_name} {split}", stats))
        parts.setdefault("train", []).extend(trains * repeats.get(corpus_name, 1))
    if replace > 0:
        parts["train"] = parts["train"] + replace_mentions(parts["train"], name_pools(nlp, replace_labels), replace, seed)
    for part, docs in parts.items():
        DocBin(docs=docs).to_disk(output_dir / f"{part}.spacy")
    return results


def checked_repeats(repeats: Dict[str, int], corpora: Sequence[str]) -> Dict[str, int]:
    """`repeats` when each names a corpus being converted and a count of 1 or more."""
    for corpus_name, times in repeats.items():
        if corpus_name not in corpora or times < 1:
            raise ValueError(f"--repeat gives {corpus_name}={times}; give a corpus of --corpora and a count of 1 or more.")
    return dict(repeats)


def parse_repeats(text: str) -> Dict[str, int]:
    """--repeat's "ncbi-disease=2,bc5cdr=1" as {corpus: times}."""
    repeats: Dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, times = item.partition("=")
        if not times.strip().isdigit():
            raise ValueError(f"--repeat reads {item!r}; write CORPUS=N, as ncbi-disease=2.")
        repeats[name.strip()] = int(times)
    return repeats


app = typer.Typer(add_completion=False, help=__doc__.splitlines()[0])


@app.callback()
def main():
    """Corpus preparation for the demo NER (a command group, so more steps can join)."""


@app.command("convert")
def convert_command(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data (its default)."),
    output_dir: Path = typer.Option(..., "--output-dir", help="Where train.spacy and dev.spacy go; keep it out of the repository."),
    corpora: str = typer.Option("bc5cdr,ncbi-disease", "--corpora", help="Comma-separated: bc5cdr, ncbi-disease."),
    held_out_fold: Optional[int] = typer.Option(None, "--held-out-fold", help="Train on the other train folds and write this one as dev.spacy (choosing a recipe); none: train and dev."),
    replace: float = typer.Option(0.0, "--replace-mentions", help="Add a copy of each train document whose mentions are replaced, with this probability, by the bundled index's names; 0: none."),
    replace_labels: str = typer.Option("Disease", "--replace-labels", help="Comma-separated labels whose mentions --replace-mentions replaces: Disease, Chemical."),
    seed: int = typer.Option(0, "--seed", help="The replacements' random seed."),
    train_on_dev: bool = typer.Option(False, "--train-on-dev", help="train.spacy holds the dev documents too: for the shipped model once the recipe is chosen (dev then scores nothing)."),
    repeat: str = typer.Option("", "--repeat", help="Comma-separated CORPUS=N: that corpus's train documents stand N times in train.spacy."),
):
    """Convert the corpora's train and dev for `spacy train`."""
    from .data.datasets import DEFAULT_DATA_DIR

    try:
        results = convert(data_dir or DEFAULT_DATA_DIR, output_dir, [c.strip() for c in corpora.split(",") if c.strip()],
                          held_out_fold, replace, [label.strip() for label in replace_labels.split(",") if label.strip()], seed, train_on_dev,
                          parse_repeats(repeat))
    except (ValueError, FileNotFoundError) as err:
        msg.fail(str(err), exits=1)
    for split, stats in results:
        msg.good(f"{split}: {stats.summary()}")
    if replace > 0:
        msg.good(f"train.spacy also holds a copy of each train document, its {replace_labels} mentions each replaced "
                 f"with probability {replace} by a name of the bundled index.")


@app.command("bundle")
def bundle_command(
    model: Path = typer.Argument(..., help="A trained pipeline, such as runs/ner/model-best."),
    output: Path = typer.Option(DEMO_NER, "--output", help="Where the demo looks for it (the package's assets/ner)."),
    metrics: List[Path] = typer.Option([], "--metrics", help="evaluate --end-to-end outputs whose span scores go into the pipeline's meta (performance)."),
    trained_on_dev: bool = typer.Option(False, "--trained-on-dev", help="The model learned the dev splits too (ner convert --train-on-dev): its meta says so, and that --metrics scored the same recipe trained on train alone."),
):
    """Copy a trained NER into the package, where `spacy-sapbert link` and `make demo` find it."""
    try:
        nlp = spacy.load(model)
    except (OSError, ValueError) as err:
        msg.fail(f"{model} is not a spaCy pipeline ({str(err).splitlines()[0]}); train it with `spacy project run ner`.", exits=1)
    if "ner" not in nlp.pipe_names:
        msg.fail(f"{model} has no ner pipe; the demo needs one that sets doc.ents.", exits=1)
    from spacy_sapbert import __version__

    splits = "train and dev" if trained_on_dev else "train"
    performance = {f"{m['dataset']} {m['split']}": m["span"] for m in (json.loads(p.read_text()) for p in metrics)}
    if trained_on_dev and performance:
        nlp.meta["performance_note"] = "the same recipe trained on train alone, scored on dev (this model learned dev)"
    nlp.meta.update({
        "name": "sapbert_ner", "version": __version__, "license": "MIT",
        # the spaCy releases setup.cfg allows, each tested (CI runs the runtime tests at the floors)
        "spacy_version": ">=3.7.5,<3.9.0",
        "description": "Disease and Chemical mentions in PubMed-style text: a CPU tok2vec + NER trained on "
                       f"BC5CDR and NCBI-disease {splits} (spacy_sapbert_training.ner)"
                       + (", reading which tokens are ontology names (sapbert_gazetteer)." if "sapbert_gazetteer" in nlp.pipe_names else "."),
        "sources": [{"name": f"BC5CDR (BioCreative V CDR) {splits}", "url": "https://biocreative.bioinformatics.udel.edu/",
                     "license": "BioCreative research licence"},
                    {"name": f"NCBI-disease {splits}", "url": "https://www.ncbi.nlm.nih.gov/CBBresearch/Dogan/DISEASE/",
                     "license": "public domain"},
                    {"name": "MeSH (chemical names left unannotated in NCBI-disease; with MONDO and the drug names "
                             "of drug-named-entity-recognition, the gazetteer's names)", "license": "NLM terms"}],
        # what evaluate --end-to-end measured (span P/R/F1 per corpus, split and label), not spaCy's own dev scoring
        "performance": performance,
    })
    # Training leaves every corpus token in the string store; the model needs none of them
    # (its embeddings hash the features), so only a blank pipeline's strings and the labels
    # are kept and no list of corpus words ships with the package.
    keep = set(spacy.blank(nlp.lang).vocab.strings) | set(nlp.get_pipe("ner").labels)
    nlp.vocab.strings._reset_and_load(sorted(keep))
    if output.exists():
        shutil.rmtree(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    msg.good(f"Bundled {model} into {output}; score it with `evaluate --end-to-end`.")


if __name__ == "__main__":
    app()
