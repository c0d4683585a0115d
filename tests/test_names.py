"""Names tables: written from an annotated corpus (training.data.names), read back as the
linker's index.names reads them (kb.formats.read_names)."""
import pytest

from spacy_sapbert.kb import KBFormatError
from spacy_sapbert.kb.formats import read_names
from spacy_sapbert.training.data import datasets as ds
from spacy_sapbert.training.data.names import corpus_names, write_names


def mention(text, *ids):
    return ds.Mention("1", 0, len(text), text, "Chemical", list(ids))


def test_a_corpus_gives_its_names_most_mentions_first(tmp_path):
    known = {"D000431": "D000431", "D000438": "D000438", "C12": "D016559", "D016559": "D016559"}
    mentions = [mention("alcohol", "D000431"), mention("Alcohol", "D000431"), mention("alcohol", "D000438"),
                mention("FK 506", "C12"),  # another id of a concept: the concept's own
                mention("quetiapine", "C999"),  # a concept the index lacks
                mention("cisplatin and  carboplatin", "D1", "D2")]  # a composite
    rows, counts = corpus_names(mentions, known.get)
    assert rows == [("alcohol", "D000431"), ("alcohol", "D000438"), ("FK 506", "D016559")]
    assert counts == {"used": 4, "not in the index": 1, "composite": 1}
    assert [(name, concept) for _, name, concept in read_names(write_names(rows, tmp_path / "n.tsv"))] == rows


@pytest.mark.parametrize("content, line", [("alcohol\n", 1), ("# note\nalcohol\tD1\textra\n", 2), ("x\t \n", 1)])
def test_a_bad_names_line_is_named(tmp_path, content, line):
    path = tmp_path / "names.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(KBFormatError, match=rf"names.tsv:{line}: expected a name and a concept id separated by one tab"):
        read_names(path)


def test_a_name_without_a_letter_or_digit_is_refused(tmp_path):
    path = tmp_path / "names.tsv"
    path.write_text("metformin\tD008687\n--\tD008687\n", encoding="utf-8")
    with pytest.raises(KBFormatError, match=r"names.tsv:2: expected a name with a letter or digit"):
        read_names(path)


def test_names_are_checked_against_the_index_the_linker_reads(tiny_index_dir, tmp_path):
    from spacy_sapbert.training.data.names import index_kb

    assert index_kb(str(tiny_index_dir)).resolve_id("D008687") == "D008687"
    with pytest.raises(FileNotFoundError, match="neither default, a knowledge base by name nor an index directory"):
        index_kb(str(tmp_path))
