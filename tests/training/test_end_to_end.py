"""End-to-end scoring: spans by boundaries and label (any case), links by id among the gold's."""
import pytest
from conftest import ruler_nlp

from spacy_sapbert_training.evaluation import end_to_end


def test_spans_and_links_are_scored_per_label(tiny_model, tiny_index_dir, monkeypatch, tmp_path):
    text = "Metformin caused lactic acidosis and a tumour."
    texts = {"1": text}
    gold = {"1": [(0, 9, "Chemical", ["D008687"]),                     # found, linked right (if the model does)
                  (17, 32, "Disease", ["D000140"]),                   # found, link checked below
                  (39, 45, "Disease", ["D009369"])]}                  # missed by the ruler below
    monkeypatch.setattr(end_to_end, "gold_documents", lambda split, data_dir, fold=0, corpus="bc5cdr": (texts, gold))
    nlp = ruler_nlp([("CHEMICAL", "metformin"), ("Disease", "lactic acidosis"), ("Disease", "caused")])
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
    doc = nlp(text)
    cuis = {e.text: e._.cui for e in doc.ents}
    metrics = end_to_end.evaluate_end_to_end(nlp, "dev", tmp_path)
    span = metrics["span"]
    assert (span["chemical"]["tp"], span["chemical"]["fp"], span["chemical"]["fn"]) == (1, 0, 0)  # CHEMICAL = Chemical
    assert (span["disease"]["tp"], span["disease"]["fp"], span["disease"]["fn"]) == (1, 1, 1)
    right = (cuis["Metformin"] == "D008687") + (cuis["lactic acidosis"] == "D000140")
    assert metrics["link"]["all"]["tp"] == right
    assert metrics["link"]["all"]["fn"] == 3 - right and metrics["link"]["all"]["fp"] == 3 - right
    assert metrics["span"]["all"]["f1"] == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))
    # "caused" overlaps no gold mention, so it should be NIL, and threshold 0 linked it
    assert (metrics["nil"]["all"]["tp"], metrics["nil"]["all"]["fn"]) == (0, 1)


def test_nil_entities_predict_no_link(tiny_model, tiny_index_dir, monkeypatch, tmp_path):
    text = "Metformin caused lactic acidosis."
    gold = {"1": [(0, 9, "Chemical", ["D008687"]), (17, 32, "Disease", [])]}  # the second is unlinkable (-1)
    monkeypatch.setattr(end_to_end, "gold_documents", lambda split, data_dir, fold=0, corpus="bc5cdr": ({"1": text}, gold))
    nlp = ruler_nlp([("Chemical", "metformin"), ("Disease", "lactic acidosis"), ("Disease", "caused")])
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "threshold": 1.0, "scoring": {"exact_first": False}})
    metrics = end_to_end.evaluate_end_to_end(nlp, "dev", tmp_path)  # every entity NIL: no model score reaches 1
    assert (metrics["link"]["all"]["tp"], metrics["link"]["all"]["fp"], metrics["link"]["all"]["fn"]) == (0, 0, 1)
    nil = metrics["nil"]["all"]  # "caused" and the unlinkable mention rightly NIL; metformin wrongly
    assert (nil["tp"], nil["fp"], nil["fn"]) == (2, 1, 0)


def test_gold_spans_give_the_pipes_own_accuracy_without_its_ner(tiny_model, tiny_index_dir, monkeypatch, tmp_path):
    text = "Metformin caused lactic acidosis and a tumour."
    texts = {"1": text}
    gold = {"1": [(0, 9, "Chemical", ["D008687"]), (17, 32, "Disease", ["D000140"]),
                  (39, 45, "Disease", ["D999999"]),  # a gold the index lacks: counted, not reachable
                  (10, 16, "Disease", [])]}          # unlinkable: not counted
    monkeypatch.setattr(end_to_end, "gold_documents", lambda split, data_dir, fold=0, corpus="bc5cdr": (texts, gold))
    nlp = ruler_nlp([("Disease", "caused")])  # an NER that finds nothing right: skipped
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "threshold": 0.0, "label_types": {}})
    metrics = end_to_end.evaluate_gold_spans(nlp, "dev", tmp_path)
    assert (metrics["chemical"]["n"], metrics["chemical"]["n_reachable"]) == (1, 1)
    assert (metrics["disease"]["n"], metrics["disease"]["n_reachable"]) == (2, 1)
    doc = nlp.make_doc(text)
    doc.ents = [doc.char_span(17, 32, label="Disease")]
    right = nlp.get_pipe("sapbert_linker")(doc).ents[0]._.cui == "D000140"
    assert metrics["disease"]["acc@1"] == right / 2 and metrics["disease"]["acc@1_reachable"] == right
    assert metrics["disease"]["linked_right"] == metrics["disease"]["acc@1"]  # threshold 0: every entity linked


def test_a_corpus_scores_only_the_labels_it_annotates(tiny_model, tiny_index_dir, monkeypatch, tmp_path):
    text = "Metformin caused lactic acidosis."
    gold = {"1": [(17, 32, "Disease", ["D000140"])]}  # a disease corpus: no chemical is annotated
    monkeypatch.setattr(end_to_end, "gold_documents",
                        lambda split, data_dir, fold=0, corpus="bc5cdr": ({"1": text}, gold))
    nlp = ruler_nlp([("Chemical", "metformin"), ("Disease", "lactic acidosis")])
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}})
    both = end_to_end.evaluate_end_to_end(nlp, "dev", tmp_path, corpus="bc5cdr")
    diseases = end_to_end.evaluate_end_to_end(nlp, "dev", tmp_path, corpus="ncbi-disease")
    assert both["span"]["chemical"]["fp"] == 1 and "chemical" not in diseases["span"]
    assert diseases["span"]["all"]["fp"] == 0 and diseases["span"]["all"]["tp"] == 1
    assert diseases["dataset"] == "ncbi-disease"


def test_ncbi_documents_are_read_as_diseases(tmp_path):
    folder = tmp_path / "ncbi-disease"
    folder.mkdir()
    (folder / "NCBIdevelopset_corpus.txt").write_text(
        "1|t|Tooth agenesis and cancer.\n1|a|Rare.\n"
        "1\t0\t14\tTooth agenesis\tSpecificDisease\tOMIM:613097\n"
        "1\t19\t25\tcancer\tDiseaseClass\tD009369|D000001\n\n")
    texts, gold = end_to_end.gold_documents("dev", tmp_path, corpus="ncbi-disease")
    assert texts["1"].startswith("Tooth agenesis")
    assert gold["1"] == [(0, 14, "Disease", ["OMIM:613097"]), (19, 25, "Disease", ["D009369", "D000001"])]
    assert end_to_end.corpus_of("bc5cdr-chemical") == "bc5cdr" and end_to_end.corpus_of("ncbi-disease") == "ncbi-disease"
