"""`sapbert_gazetteer`: ontology names marked on a document's tokens as a feature for the NER."""
import numpy as np
import spacy

from spacy_sapbert.pipe.gazetteer import SOURCES, Gazetteer, GazetteerTags


def _table(nlp):
    names = [("myocardial infarction", 0), ("infarction", 0), ("acute myocardial infarction", 0),
             ("aspirin", 1), ("Lipitor", 3), ("cyclosporin", 2), ("cyclosporin", 1)]
    return Gazetteer.from_names(nlp, names)


def test_the_longest_name_wins_and_each_source_has_its_own_letter():
    nlp = spacy.blank("en")
    gazetteer = _table(nlp)
    doc = nlp("Acute myocardial infarction after aspirin , LIPITOR and cyclosporin ; infarction again")
    tags = dict(zip([t.text for t in doc], gazetteer.tags(doc)))
    assert tags["Acute"] == "B---" and tags["myocardial"] == "I---" and tags["infarction"] == "B---"
    assert [tags[w] for w in ("aspirin", "LIPITOR", "cyclosporin")] == ["-B--", "---B", "-BB-"]
    assert tags["after"] == tags[";"] == "-" * len(SOURCES)


def test_a_name_longer_than_max_tokens_is_left_out_and_an_empty_doc_has_no_tags():
    nlp = spacy.blank("en")
    gazetteer = Gazetteer.from_names(nlp, [("a b c d", 0), ("b c", 1)], max_tokens=3)
    assert gazetteer.tags(nlp("a b c d")) == ["----", "-B--", "-I--", "----"]
    assert gazetteer.tags(nlp("")) == []
    assert Gazetteer().tags(nlp("a b")) == ["----", "----"]


def test_the_component_sets_tags_and_survives_a_save_and_load(tmp_path):
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe("sapbert_gazetteer")
    assert isinstance(pipe, GazetteerTags)
    pipe.gazetteer = _table(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    doc = loaded("aspirin and infarction")
    assert [t.tag_ for t in doc] == ["-B--", "----", "B---"]
    saved = loaded.get_pipe("sapbert_gazetteer").gazetteer
    assert np.array_equal(saved.hashes, pipe.gazetteer.hashes) and np.array_equal(saved.bits, pipe.gazetteer.bits)
