"""The texts a smaller student learns its teacher's vectors on (`[objective] loss = "distill"`):
the bundled index's names, its supplement's chemical and drug names, and the train mentions of
NCBI-disease and BC5CDR (their train split only: dev stays unseen).

    python -m spacy_sapbert_training.data.texts --data-dir ../shared/data --output corpus/distill_texts.tsv.gz

One line a text: its source, a tab, the text; each source's texts distinct and sorted, so the file
is the same on every machine. It holds corpus mentions: keep it out of git.
"""
import gzip
from pathlib import Path
from typing import Dict, List, Sequence

import typer
from wasabi import msg

from spacy_sapbert.kb.concepts import PathLike

# The sources a texts file holds, in file order.
SOURCES = ("names", "supplement", "mentions")
MENTION_DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")


class TextsFormatError(ValueError):
    """A texts file has a line that is not `source<TAB>text`."""


def train_mentions(data_dir: PathLike, datasets: Sequence[str] = MENTION_DATASETS) -> List[str]:
    """The distinct texts of the datasets' train mentions, sorted."""
    from .datasets import load_pubtator_split

    return sorted({m.text for name in datasets for m in load_pubtator_split(name, "train", data_dir).mentions})


def bundled_texts(data_dir: PathLike, supplement: bool = True) -> Dict[str, List[str]]:
    """Source → distinct sorted texts: the bundled index's names (its KB), its supplement's, and
    the train mentions."""
    from spacy_sapbert.assets import BUNDLED_INDEX
    from spacy_sapbert.kb.bundled import default_kb
    from spacy_sapbert.search.supplement import NAMES_FILE, SUPPLEMENT_DIR, RowNames

    kb, _ = default_kb()
    texts = {"names": sorted({name for concept in kb for name in concept.names})}
    path = BUNDLED_INDEX / SUPPLEMENT_DIR / NAMES_FILE
    texts["supplement"] = sorted(set(RowNames(path).all())) if supplement and path.exists() else []
    texts["mentions"] = train_mentions(data_dir)
    return texts


def write_texts(texts: Dict[str, List[str]], path: PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for source in SOURCES:
            for text in texts.get(source, []):
                handle.write(f"{source}\t{text}\n")
    return path


def read_texts(path: PathLike) -> Dict[str, List[str]]:
    """Source → texts of a file `write_texts` wrote; one sentence naming the line for a bad one."""
    texts: Dict[str, List[str]] = {source: [] for source in SOURCES}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            source, tab, text = line.rstrip("\n").partition("\t")
            if not tab or source not in texts or not text.strip():
                raise TextsFormatError(f"{path}:{number}: expected a source ({', '.join(SOURCES)}), a tab and a "
                                       "text; write the file with `python -m spacy_sapbert_training.data.texts`.")
            texts[source].append(text)
    return texts


def main(
    output: Path = typer.Option(..., help="The texts file to write (.tsv.gz; keep it out of git: it holds corpus mentions)"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
    supplement: bool = typer.Option(True, help="Take the supplement's chemical and drug names too"),
) -> None:
    """Write the texts a student distils its teacher's vectors on."""
    texts = bundled_texts(data_dir, supplement)
    write_texts(texts, output)
    msg.good(f"Wrote {output}: " + ", ".join(f"{len(texts[s]):,} {s}" for s in SOURCES))


if __name__ == "__main__":
    typer.run(main)
