"""Names tables: written from an annotated corpus (training.data.names), read back as the
linker's index.names reads them (kb.formats.read_names)."""
import pytest

from spacy_sapbert.kb import KBFormatError
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.kb.formats import read_names
from spacy_sapbert_training.data import datasets as ds
from spacy_sapbert_training.data.names import corpus_names, older_ids, write_names


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
    assert [(name, concept) for _, name, concept, _ in read_names(write_names(rows, tmp_path / "n.tsv"))] == rows


def test_a_composite_mention_gives_its_name_each_of_its_concepts():
    """"breast or ovarian cancer" (two ids) names both concepts, in the order of their counts and
    ids, beside what single mentions of the name give; the rule off leaves composites out."""
    from spacy_sapbert_training.data.names import TableRules

    known = {i: i for i in ("D001943", "D010051", "D061325")}
    mentions = [mention("breast or ovarian cancer", "D010051", "D001943", "C404"),  # C404: not in the index
                mention("breast and ovarian cancer", "D061325"), mention("Breast and ovarian cancer", "D061325"),
                mention("breast and ovarian cancer", "D001943", "D010051")]
    rows, counts = corpus_names(mentions, known.get)
    assert rows == [("breast and ovarian cancer", "D061325"), ("breast and ovarian cancer", "D001943"),
                    ("breast and ovarian cancer", "D010051"), ("breast or ovarian cancer", "D001943"),
                    ("breast or ovarian cancer", "D010051")]
    assert counts == {"used": 2, "composite": 2}
    assert corpus_names(mentions, known.get, rules=TableRules(composite=False))[0] == [
        ("breast and ovarian cancer", "D061325")]


def test_an_id_the_index_lacks_is_kept_as_an_older_id_of_the_one_concept_its_names_name(tmp_path):
    kb = KnowledgeBase()
    kb.add(Concept("D000093542", "Gemcitabine", aliases=["Gemzar"], types=["D03"]))
    kb.add(Concept("D019343", "Citric Acid", aliases=["citrate"], types=["D02"]))
    kb.add(Concept("D000077559", "Sodium Citrate", types=["D02"]))
    kb.add(Concept("D018478", "Extravehicular Activity", aliases=["EVA", "space walk"], types=["G01"]))
    kb.add(Concept("C538167", "Acidemia, isovaleric", aliases=["IVA"], types=["D08"]))
    mentions = [mention("gemcitabine", "C056507"), mention("GEM", "C056507"),  # GEM: a name no concept bears
                mention("citrate", "C102006"), mention("sodium citrate", "C102006"),  # names of two concepts
                mention("IVA", "C064227"),  # a short form: not read, though a name of the index
                mention("Gemzar", "CHEBI:175901"),  # another scheme's id: a cross-reference, not an older id
                mention("venlafaxine", "C047426")]  # no concept bears its name
    rows, counts = corpus_names(mentions, kb.resolve_id, older_ids(kb, {"Chemical": ["D"]}))
    assert rows == [("GEM", "C056507", "D000093542"), ("gemcitabine", "C056507", "D000093542")]
    assert counts == {"used": 2, "older ids": 2, "not in the index": 5}
    assert [row[1:] for row in read_names(write_names(rows, tmp_path / "n.tsv"))] == rows
    # an id whose mentions of two labels give two concepts is no older id of either
    two = [mention("gemcitabine", "C056507"), ds.Mention("1", 0, 10, "space walk", "Disease", ["C056507"])]
    assert corpus_names(two, kb.resolve_id, older_ids(kb, {"Chemical": ["D"]}))[0] == []
    # a name borne by a concept of no type the label may take is not read, save without label types
    walk = [mention("space walk", "C000001")]
    assert corpus_names(walk, kb.resolve_id, older_ids(kb, {"Chemical": ["D"]}))[0] == []
    assert corpus_names(walk, kb.resolve_id, older_ids(kb))[0] == [("space walk", "C000001", "D018478")]


@pytest.mark.parametrize("content, line", [("alcohol\n", 1), ("# note\nalcohol\tD1\tD2\textra\n", 2),
                                           ("x\t \n", 1), ("x\tC1\t\n", 1)])
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
    from spacy_sapbert_training.data.names import index_kb

    kb, label_types = index_kb(str(tiny_index_dir))
    assert kb.resolve_id("D008687") == "D008687" and isinstance(label_types, dict)
    with pytest.raises(FileNotFoundError, match="neither default, a knowledge base by name nor an index directory"):
        index_kb(str(tmp_path))


def test_table_rules_choose_which_names_a_table_keeps():
    from spacy_sapbert_training.data.names import TableRules

    known = {"D1": "D1", "D2": "D2", "D3": "D3"}
    mentions = [mention("toxicity", "D1"), mention("toxicity", "D1"), mention("toxicity", "D2"),
                mention("PD", "D3"), mention("PD", "D3"), mention("rare", "D3")]
    assert corpus_names(mentions, known.get)[0] == [("PD", "D3"), ("rare", "D3"), ("toxicity", "D1"), ("toxicity", "D2")]
    assert corpus_names(mentions, known.get, rules=TableRules(min_count=2))[0] == [("PD", "D3"), ("toxicity", "D1")]
    assert corpus_names(mentions, known.get, rules=TableRules(short_forms=False))[0] == [
        ("rare", "D3"), ("toxicity", "D1"), ("toxicity", "D2")]
    assert corpus_names(mentions, known.get, rules=TableRules(ambiguous="majority"))[0] == [
        ("PD", "D3"), ("rare", "D3"), ("toxicity", "D1")]
    assert corpus_names(mentions, known.get, rules=TableRules(ambiguous="drop"))[0] == [("PD", "D3"), ("rare", "D3")]
    with pytest.raises(ValueError, match="ambiguous 'some' is not one of keep, majority, drop"):
        TableRules(ambiguous="some")


def test_an_index_ships_a_names_table_read_after_the_users_and_switched_off_by_shipped_names(
        tiny_model, tiny_index_dir, tmp_path):
    import shutil

    import spacy
    from spacy.tokens import Span

    from spacy_sapbert.search.index import NAMES_FILE

    index = shutil.copytree(tiny_index_dir, tmp_path / "index")
    write_names([("sugar disease", "D003922")], index / NAMES_FILE)
    user = write_names([("sugar disease", "D003924")], tmp_path / "mine.tsv")

    def first(**index_config):
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "threshold": 0.0,
                                               "index": {"index": str(index), **index_config}})
        doc = nlp.make_doc("sugar disease")
        doc.ents = [Span(doc, 0, 2, "Disease")]
        return nlp(doc).ents[0]._.kb_ents[:2]

    assert first()[0] == ("D003922", 1.0)  # the shipped table's concept, as an identical name
    assert first(names=str(user)) == [("D003924", 1.0), ("D003922", 1.0)]  # the user's table, then the shipped one
    assert first(shipped_names=False)[0][1] < 1.0  # no table: "sugar disease" is no name of the index
