"""BC5CDR → spaCy training docs for the demo NER: nothing lost silently."""
import re

import pytest
import spacy
from spacy.tokens import DocBin

from spacy_sapbert.pipe.tokenization import biomedical_tokens
from spacy_sapbert_training.data.datasets import read_pubtator
from spacy_sapbert_training.ner import ConversionStats, convert, corpus_docs, replace_mentions

TEXT_T = "Cisplatin-induced nephrotoxicity"
TEXT_A = "Rats got cisplatin and aminoCAT; renal failure followed. NTG (NTG)-induced pain."
PUBTATOR = "\n".join([
    f"1|t|{TEXT_T}",
    f"1|a|{TEXT_A}",
    "1\t0\t9\tCisplatin\tChemical\tD002945",
    "1\t18\t32\tnephrotoxicity\tDisease\tD007674",
    # mid-token: "amino" inside "aminoCAT" widens to the whole token
    "1\t56\t61\tamino\tChemical\t-1",
    # overlaps "renal failure": counted, not silently kept or dropped
    "1\t66\t78\trenal failur\tDisease\tD051437",
    "1\t66\t79\trenal failure\tDisease\tD051437",
    # "(NTG)-induced": the tokenizer rule puts "NTG" on token boundaries
    "1\t95\t98\tNTG\tChemical\tD005996",
    "1\tCID\tD002945\tD007674",
    "",
])


def test_mentions_become_entities_and_every_mention_is_accounted_for(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(PUBTATOR)
    corpus = read_pubtator(path, keep_unlinkable=True)
    stats = ConversionStats()
    (doc,) = corpus_docs(corpus, biomedical_tokens(spacy.blank("en")), stats)
    ents = [(e.text, e.label_) for e in doc.ents]
    assert ("Cisplatin", "Chemical") in ents and ("nephrotoxicity", "Disease") in ents
    assert ("aminoCAT", "Chemical") in ents  # the unlinkable mention is still a mention
    assert stats.mentions == 6 and stats.exact + stats.expanded == 6
    assert stats.expanded == 2 and stats.overlapping == 1
    assert stats.mentions == len(doc.ents) + stats.overlapping


def test_convert_writes_train_and_dev(tmp_path):
    data = tmp_path / "data"
    (data / "bc5cdr").mkdir(parents=True)
    for name in ("CDR_TrainingSet.PubTator.txt", "CDR_DevelopmentSet.PubTator.txt"):
        (data / "bc5cdr" / name).write_text(PUBTATOR)
    results = convert(data, tmp_path / "out")
    assert [split for split, _ in results] == ["bc5cdr train", "bc5cdr dev"]
    docs = list(DocBin().from_disk(tmp_path / "out" / "train.spacy").get_docs(spacy.blank("en").vocab))
    assert len(docs) == 1 and len(docs[0].ents) == 5
    assert ("NTG", "Chemical") in {(e.text, e.label_) for e in docs[0].ents}


def test_the_shipped_model_can_learn_dev_too_and_a_corpus_can_weigh_more(tmp_path):
    data = tmp_path / "data"
    (data / "bc5cdr").mkdir(parents=True)
    for name, doc_id in (("CDR_TrainingSet.PubTator.txt", "1"), ("CDR_DevelopmentSet.PubTator.txt", "2")):
        (data / "bc5cdr" / name).write_text(re.sub(r"(?m)^1(?=[|\t])", doc_id, PUBTATOR))
    vocab = spacy.blank("en").vocab

    def train_texts(**options):
        convert(data, tmp_path / "out", **options)
        return [d.text for d in DocBin().from_disk(tmp_path / "out" / "train.spacy").get_docs(vocab)]

    assert len(train_texts()) == 1
    assert len(train_texts(train_on_dev=True)) == 2
    assert len(train_texts(train_on_dev=True, repeats={"bc5cdr": 3})) == 6
    # dev.spacy still holds dev's documents, for a look; nothing scored there chooses anything
    assert len(DocBin().from_disk(tmp_path / "out" / "dev.spacy")) == 1
    with pytest.raises(ValueError, match="--repeat"):
        convert(data, tmp_path / "out", repeats={"ncbi-disease": 2})


NCBI = "\n".join([
    "7|t|Iron overload and hereditary haemochromatosis",
    "7|a|Patients given iron developed haemochromatosis.",
    "7\t18\t45\thereditary haemochromatosis\tSpecificDisease\tD006432",
    "7\t76\t92\thaemochromatosis\tSpecificDisease\tD006432",
    "",
])


def test_a_disease_only_corpus_leaves_the_chemicals_it_does_not_mark_missing(tmp_path):
    from spacy.matcher import PhraseMatcher

    path = tmp_path / "ncbi.txt"
    path.write_text(NCBI)
    nlp = biomedical_tokens(spacy.blank("en"))
    matcher = PhraseMatcher(nlp.vocab, attr="LOWER")
    matcher.add("Chemical", [nlp.make_doc("iron"), nlp.make_doc("haemochromatosis")])
    stats = ConversionStats()
    (doc,) = corpus_docs(read_pubtator(path), nlp, stats, ("Disease",), matcher)
    # NCBI's mention classes are diseases; "iron" is neither chemical nor outside; a name inside
    # a disease mention stays the disease's
    assert [(e.text, e.label_) for e in doc.ents] == [("hereditary haemochromatosis", "Disease"), ("haemochromatosis", "Disease")]
    assert [t.text for t in doc if t.ent_iob == 0] == ["Iron", "iron"]
    assert doc[1].ent_iob_ == "O" and stats.missing == 2


def test_mention_replacement_swaps_names_and_keeps_what_is_missing(tmp_path):
    path = tmp_path / "ncbi.txt"
    path.write_text(NCBI)
    nlp = biomedical_tokens(spacy.blank("en"))
    (doc,) = corpus_docs(read_pubtator(path, keep_unlinkable=True), nlp, ConversionStats(), ("Disease",))
    missing = doc[2:3]  # "and": as if a chemical name the corpus leaves unmarked
    doc.set_ents(list(doc.ents), missing=[missing], default="unmodified")
    pools = {"Disease": [(["long", "QT", "syndrome"], [True, True, False])]}
    (copy,) = replace_mentions([doc], pools, 1.0)
    assert [(e.text, e.label_) for e in copy.ents] == [("long QT syndrome", "Disease")] * 2
    assert copy.text.startswith("Iron overload and long QT syndrome") and copy.text.endswith("long QT syndrome.")
    assert [t.ent_iob_ for t in copy if t.text == "and"] == [""]  # still missing, not "outside"
    assert [(e.text, e.label_) for e in replace_mentions([doc], pools, 0.0)[0].ents] == [(e.text, e.label_) for e in doc.ents]
    # the same seed, the same copies
    pools["Disease"].append((["asthma"], [False]))
    assert [d.text for d in replace_mentions([doc] * 4, pools, 0.5, seed=3)] == [d.text for d in replace_mentions([doc] * 4, pools, 0.5, seed=3)]


def test_the_bundled_ner_loads_and_finds_diseases_and_chemicals():
    from spacy_sapbert.pipe.bundled import DEMO_NER

    nlp = spacy.load(DEMO_NER)
    doc = nlp("Acute renal failure and hypertension were reported in two patients treated with cisplatin.")
    ents = {(e.text, e.label_) for e in doc.ents}
    assert ("hypertension", "Disease") in ents and ("cisplatin", "Chemical") in ents
    assert len(nlp.vocab.strings) < 2000  # no corpus vocabulary shipped
    # Its tokenizer keeps the rule it was trained with, without spacy_sapbert's callback.
    assert [t.text for t in nlp.make_doc("nitroglycerin (NTG)-induced")] == ["nitroglycerin", "(", "NTG", ")", "-induced"]
