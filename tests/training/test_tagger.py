"""The sapbert_ner pipe: BIO tags to spans, windows over long texts, the training targets of two
corpora that annotate different labels, and a tiny exported tagger in a spaCy pipeline."""
import json

import numpy as np
import pytest
import spacy

from spacy_sapbert.pipe.tagger import TaggerError, best_window, bio_tags, decode_tags, windows

TAGS = bio_tags(["Disease", "Chemical"])


def test_tags_decode_to_character_spans():
    offsets = [(0, 0), (0, 9), (9, 10), (10, 17), (18, 32), (33, 36), (37, 43), (43, 46), (0, 0)]
    tags = ["O", "B-Chemical", "O", "O", "B-Disease", "O", "I-Disease", "I-Disease", "O"]
    assert decode_tags(tags, offsets) == [(0, 9, "Chemical", 1.0), (18, 32, "Disease", 1.0), (37, 46, "Disease", 1.0)]
    # an I- tag of another label than the open span's starts a span of its own
    assert [s[:3] for s in decode_tags(["B-Disease", "I-Chemical"], [(0, 3), (4, 6)])] == [(0, 3, "Disease"), (4, 6, "Chemical")]
    assert decode_tags(["B-Disease", "I-Disease"], [(0, 3), (3, 6)], [0.5, 1.0]) == [(0, 6, "Disease", 0.75)]


def test_windows_cover_every_wordpiece_and_each_takes_its_most_central_window():
    assert windows(5, 10, 2) == [(0, 5)]
    spans = windows(25, 10, 4)
    assert spans[0] == (0, 10) and spans[-1] == (15, 25)
    assert all(b[0] < a[1] for a, b in zip(spans, spans[1:]))  # they overlap
    assert {best_window(i, spans) for i in range(25)} == set(range(len(spans)))
    assert best_window(8, spans) == 1 and best_window(2, spans) == 0


def test_a_corpus_that_marks_no_chemicals_leaves_them_possible_outside_its_mentions():
    from spacy_sapbert_training.tagger import TAGS as TRAINED, allowed_tags

    offsets = [(0, 5), (6, 9), (9, 12), (13, 20)]
    mentions = [(6, 12, "Disease")]
    bc5cdr = allowed_tags(offsets, mentions, "bc5cdr")
    ncbi = allowed_tags(offsets, mentions, "ncbi-disease")
    names = lambda row: {TRAINED[i] for i in np.where(row)[0]}  # noqa: E731
    assert [names(r) for r in bc5cdr] == [{"O"}, {"B-Disease"}, {"I-Disease"}, {"O"}]
    assert names(ncbi[0]) == {"O", "B-Chemical", "I-Chemical"} and names(ncbi[1]) == {"B-Disease"}


@pytest.fixture(scope="module")
def tiny_tagger(tiny_model, tmp_path_factory):
    """A tiny BERT token classifier that tags every wordpiece B-Chemical, exported to int8 ONNX."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    from spacy_sapbert_training.tagger import export

    path = tmp_path_factory.mktemp("tagger-model")
    config = BertConfig.from_pretrained(tiny_model, num_labels=len(TAGS), id2label=dict(enumerate(TAGS)))
    torch.manual_seed(0)
    model = BertForTokenClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.bias[TAGS.index("B-Chemical")] = 5.0
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(path)
    (path / "tagger_training.json").write_text(json.dumps({"tags": TAGS, "max_length": 8, "stride": 2, "epochs": 1}))
    return export(path, tmp_path_factory.mktemp("tagger") / "tagger")


def test_the_pipe_sets_entities_and_round_trips_through_disk(tiny_tagger, tmp_path):
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("sapbert_ner")
    ner.from_disk(tiny_tagger)
    text = "Metformin and cisplatin, then aspirin for diabetes and lactic acidosis in two of the rats."
    doc = nlp(text)
    # every wordpiece is B-Chemical, so each word, across window edges too, is an entity of its own
    assert [e.text for e in doc.ents] == [t.text for t in doc]
    assert {e.label_ for e in doc.ents} == {"Chemical"} and all(e._.ner_score > 0.5 for e in doc.ents)
    assert ner.labels == ("Disease", "Chemical")
    nlp.to_disk(tmp_path / "pipeline")
    config = (tmp_path / "pipeline" / "config.cfg").read_text()
    assert "model = null" in config  # the model travels in the pipe's own folder, not as a path
    loaded = spacy.load(tmp_path / "pipeline")
    assert [(e.start, e.end, e.label_) for e in loaded(text).ents] == [(e.start, e.end, e.label_) for e in doc.ents]
    texts = [text, "Aspirin.", ""]
    assert ([[e.text for e in d.ents] for d in loaded.pipe(texts, n_process=2)]
            == [[e.text for e in d.ents] for d in nlp.pipe(texts)])


def test_a_pipe_without_its_model_says_so(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_ner")
    with pytest.raises(TaggerError, match="has no model"):
        nlp("aspirin")
    (tmp_path / "tagger.json").write_text("{")
    with pytest.raises(TaggerError, match="tagger.json line 1 is not JSON"):
        nlp.get_pipe("sapbert_ner").from_disk(tmp_path)


def test_a_bundled_tagger_loads_with_the_biomedical_tokenizer_and_its_meta(tiny_tagger, tmp_path):
    from spacy_sapbert_training.tagger import bundle

    out = bundle(tiny_tagger, tmp_path / "ner", {"bc5cdr dev": {"f1": 0.5}})
    nlp = spacy.load(out)
    assert nlp.pipe_names == ["sapbert_ner"] and nlp.meta["license"] == "MIT"
    assert [t.text for t in nlp.make_doc("nitroglycerin (NTG)-induced")] == ["nitroglycerin", "(", "NTG", ")", "-induced"]
    assert nlp("Aspirin.").ents
