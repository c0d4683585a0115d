"""A name in parentheses takes the ranking of the name before it (mentions.parenthetical), in the
pipe and in the harness alike."""
import pytest
from conftest import ruler_nlp

from spacy_sapbert.mentions.parenthetical import parenthetical_sources


def placed(text, *mentions):
    """(start, end, text) of each mention, found left to right."""
    out, start = [], 0
    for mention in mentions:
        start = text.index(mention, start)
        out.append((start, start + len(mention), mention))
        start += len(mention)
    return out


def test_a_code_in_parentheses_and_its_repeats_take_the_name_before():
    text = "amrubicin (SM-5887) was given; SM-5887 was well tolerated."
    mentions = placed(text, "amrubicin", "SM-5887", "SM-5887")
    assert parenthetical_sources(text, mentions, [0.95, 0.40, 0.40]) == {1: 0, 2: 0}


def test_a_name_in_parentheses_gives_its_ranking_to_a_code_before_it():
    text = "WR-2721 (amifostine) was given; WR-2721 protects."
    mentions = placed(text, "WR-2721", "amifostine", "WR-2721")
    assert parenthetical_sources(text, mentions, [0.40, 0.95, 0.40]) == {0: 1, 2: 1}


def test_a_short_form_in_parentheses_gives_nothing_back():
    from spacy_sapbert.mentions.abbreviations import is_short_form

    text = "the extract of Daucus carota seeds (DCE) was given"
    mentions = placed(text, "extract of Daucus carota seeds", "DCE")
    assert parenthetical_sources(text, mentions, [0.60, 0.90]) == {0: 1}
    assert parenthetical_sources(text, mentions, [0.60, 0.90], is_short_form) == {}
    assert parenthetical_sources(text, mentions, [0.90, 0.60], is_short_form) == {1: 0}


@pytest.mark.parametrize("text, first, second, top", [
    ("the K(Na) of the pump", "K", "Na", [1.0, 0.5]),            # no space: notation, not an aside
    ("amrubicin (SM-5887) was given", "amrubicin", "SM-5887", [0.9, 0.9]),  # a tie changes nothing
    ("amrubicin (SM-5887, a code) was given", "amrubicin", "SM-5887", [0.9, 0.4]),  # not alone in it
    ("amrubicin and (SM-5887) were given", "amrubicin", "SM-5887", [0.9, 0.4]),  # not side by side
])
def test_what_is_not_a_parenthetical_name_is_left_alone(text, first, second, top):
    assert parenthetical_sources(text, placed(text, first, second), top) == {}


def test_a_mention_the_rule_does_not_apply_to_neither_gives_nor_takes():
    text = "amrubicin (SM-5887) was given; SM-5887 again."
    mentions = placed(text, "amrubicin", "SM-5887", "SM-5887")
    assert parenthetical_sources(text, mentions, [None, 0.4, 0.4]) == {}
    assert parenthetical_sources(text, mentions, [0.9, 0.4, None]) == {1: 0}


def test_the_first_definition_wins_and_order_of_mentions_does_not_matter():
    text = "amrubicin (SM-5887) and later doxorubicin (SM-5887)."
    mentions = placed(text, "amrubicin", "SM-5887", "doxorubicin", "SM-5887")
    assert parenthetical_sources(text, mentions, [0.9, 0.4, 0.95, 0.4]) == {1: 0, 3: 0}
    reordered = [mentions[i] for i in (3, 2, 1, 0)]
    assert parenthetical_sources(text, reordered, [0.4, 0.95, 0.4, 0.9]) == {0: 3, 2: 3}


def _pipe(tiny_model, tiny_index_dir, **config):
    nlp = ruler_nlp([("Chemical", "metformin"), ("Chemical", "XQ-9"), ("Disease", "lactic acidosis"),
                     ("Disease", "LQ-7")])
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model), "precision": "fp32"}, "index": {"index": str(tiny_index_dir)},
        "threshold": 0.0, "label_types": {}, **config})
    linker.initialize()
    return nlp


TEXT = "metformin (XQ-9) caused lactic acidosis (LQ-7); XQ-9 was stopped."


def test_the_pipe_gives_a_chemicals_parenthetical_name_the_candidates_before_it(tiny_model, tiny_index_dir):
    doc = _pipe(tiny_model, tiny_index_dir)(TEXT)
    ents = {(e.text, e.start_char): e for e in doc.ents}
    metformin = ents["metformin", 0]._.kb_ents
    assert metformin[0][0] == "D008687"
    assert ents["XQ-9", 11]._.kb_ents == metformin and ents["XQ-9", 48]._.kb_ents == metformin
    assert ents["XQ-9", 48]._.cui == "D008687"
    # Diseases are not among the default parenthetical_labels: LQ-7 keeps its own candidates.
    assert ents["LQ-7", 41]._.kb_ents != ents["lactic acidosis", 24]._.kb_ents


def test_the_pipe_without_parenthetical_labels_links_each_name_alone(tiny_model, tiny_index_dir):
    doc = _pipe(tiny_model, tiny_index_dir, parenthetical_labels=[])(TEXT)
    ents = {(e.text, e.start_char): e for e in doc.ents}
    assert ents["XQ-9", 11]._.kb_ents != ents["metformin", 0]._.kb_ents
    both = _pipe(tiny_model, tiny_index_dir, parenthetical_labels=["chemical", "DISEASE"])(TEXT)
    ents = {(e.text, e.start_char): e for e in both.ents}
    assert ents["LQ-7", 41]._.kb_ents == ents["lactic acidosis", 24]._.kb_ents


def test_the_pipe_skips_the_rule_only_where_no_mention_is_followed_by_a_parenthesis():
    import spacy

    from spacy_sapbert.pipe.linker import _opens_parenthesis

    doc = spacy.blank("en")("metformin  (XQ-9) and cisplatin; (x) GABA(A)")
    assert _opens_parenthesis(doc, 1)  # past the extra space
    assert not _opens_parenthesis(doc, 7) and not _opens_parenthesis(doc, len(doc))  # ";", the end
    assert _opens_parenthesis(doc, 8)


def test_parenthetical_labels_must_be_a_list_of_labels():
    import spacy

    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="parenthetical_labels"):  # spaCy's config check names the key
        nlp.add_pipe("sapbert_linker", config={"parenthetical_labels": "Chemical"})
    linker = nlp.add_pipe("sapbert_linker")
    with pytest.raises(ValueError, match=r"^parenthetical_labels \('Chemical'\) must be a list of entity labels"):
        linker.parenthetical_labels = "Chemical"
    assert linker.parenthetical_labels == ["Chemical"]


class _Scored:
    """A system with fixed scored rankings, as the model system gives them."""

    build_seconds = 0.0

    def __init__(self, ranked):
        self.ranked = ranked

    def rank_scored(self, texts, k=10):
        return [self.ranked[t][:k] for t in texts]

    def rank(self, texts, k=10):
        return [[c for c, _ in row] for row in self.rank_scored(texts, k)]


def test_the_harness_follows_parentheticals_as_the_pipe_does():
    from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
    from spacy_sapbert_training.data import datasets as ds
    from spacy_sapbert_training.data.protocol import build_queries
    from spacy_sapbert_training.evaluation.evaluate import Task, evaluate_linking

    text = "amrubicin (SM-5887) was given; SM-5887 was well tolerated."
    kb = KnowledgeBase([Concept("C1", "amrubicin"), Concept("C2", "SM 5880")])
    mentions = [ds.Mention("1", start, end, surface, "Chemical", ["C1"])
                for start, end, surface in placed(text, "amrubicin", "SM-5887", "SM-5887")]
    task = Task(build_queries(mentions, "lenient"), kb, documents={"1": text})
    system = _Scored({"amrubicin": [("C1", 1.0)], "SM-5887": [("C2", 0.6), ("C1", 0.3)]})
    assert evaluate_linking(task, system)["acc@1"] == pytest.approx(1 / 3)
    assert evaluate_linking(task, system, parentheticals=True)["acc@1"] == 1.0
