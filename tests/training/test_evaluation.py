import json
from pathlib import Path

import pytest

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert_training.data import datasets as ds
from spacy_sapbert_training.evaluation.evaluate import Task, evaluate_linking
from spacy_sapbert_training.evaluation.scoring import accuracy_at_k
from spacy_sapbert_training.data.protocol import (
    TextNormaliser,
    build_queries,
    composite_gold,
    dictionary_additions,
    document_abbreviations,
    split_composite,
    add_training_names,
)
from spacy_sapbert_training.evaluation.systems import CharTfidf, ExactMatch

TITLE = "Duchenne muscular dystrophy (DMD) and breast and ovarian cancer."
ABSTRACT = "DMD boys were studied. Ataxia-telangiectasia was absent."
PUBTATOR = f"""111|t|{TITLE}
111|a|{ABSTRACT}
111\t0\t27\tDuchenne muscular dystrophy\tSpecificDisease\tD020388
111\t29\t32\tDMD\tSpecificDisease\tMESH:D020388
111\t38\t63\tbreast and ovarian cancer\tCompositeMention\tD001943|D010051
111\t65\t68\tDMD\tSpecificDisease\tD020388+OMIM:310200
111\t88\t109\tAtaxia-telangiectasia\tDisease\t-1
111\tCID\tD000001\tD020388

222|t|Second
222|a|Doc.
222\t0\t6\tSecond\tDisease\t208900
"""


@pytest.fixture
def pubtator(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(PUBTATOR)
    return path


def test_pubtator_ids_composites_and_unlinkable(pubtator):
    corpus = ds.read_pubtator(pubtator)
    assert [d.doc_id for d in corpus.documents] == ["111", "222"]
    mentions = corpus.mentions
    assert [m.text for m in mentions] == ["Duchenne muscular dystrophy", "DMD", "breast and ovarian cancer", "DMD", "Second"]
    assert mentions[1].ids == ["D020388"] and not mentions[1].composite
    assert mentions[2].ids == ["D001943", "D010051"] and mentions[2].composite
    assert mentions[3].ids == ["D020388", "OMIM:310200"] and mentions[3].composite
    assert mentions[4].ids == ["OMIM:208900"]
    assert corpus.n_unlinkable == 1
    assert ds.read_pubtator(pubtator, types=["CompositeMention"]).mentions[0].text == "breast and ovarian cancer"


def test_pubtator_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("1|t|Title\n1|a|Text.\n1\t0\t5\tTitle\n")
    with pytest.raises(ds.CorpusFormatError, match=r"bad\.txt:3: expected 'pmid<TAB>start<TAB>end"):
        ds.read_pubtator(bad)
    bad.write_text("1|t|Title\n1|a|Text.\n1\t0\t4\tTitle\tDisease\tD1\n")
    with pytest.raises(ds.CorpusFormatError, match=r"bad\.txt:3: offsets 0-4 give 'Titl', not the mention 'Title'"):
        ds.read_pubtator(bad)
    with pytest.raises(FileNotFoundError, match=r"does not exist; check --data-dir"):
        ds.read_pubtator(tmp_path / "missing.txt")


def test_duplicate_documents_keep_all_mentions(tmp_path):
    path = tmp_path / "dup.txt"
    path.write_text("5|t|Fever\n5|a|x\n5\t0\t5\tFever\tD\tD1\n\n5|t|Fever\n5|a|x\n5\t0\t5\tFever\tD\tD1\n")
    corpus = ds.read_pubtator(path)
    assert len(corpus.documents) == 2 and len(corpus.mentions) == 2


def test_cadec_concepts_and_pairs(tmp_path):
    standard = tmp_path / "standard.txt"
    standard.write_text("279038004\tthoracic back pain\n162076009\texcessive gas\n")
    kb = ds.read_cadec_concepts(standard)
    assert kb.cui_to_entity["279038004"].canonical_name == "thoracic back pain"
    pairs = tmp_path / "test.txt"
    pairs.write_text("279038004\tpain in upper back\n162076009 gastritis\n")
    with pytest.raises(ds.CorpusFormatError, match=r"test\.txt:2: expected 'concept-id<TAB>mention'"):
        ds.read_cadec_pairs(pairs)


def test_relatedness_readers(tmp_path):
    mayo = tmp_path / "MayoSRS.csv"
    mayo.write_text('"Mean","CUI1","CUI2","TERM1","TERM2"\n6.69,"C1","C2","difficulty walking","antalgic gait"\n')
    assert ds.read_mayosrs(mayo)[0].score == 6.69
    umn = tmp_path / "umnsrs.txt"
    umn.write_text("carbatrol\tdilantin\t797.5\nbroken line\n")
    with pytest.raises(ds.CorpusFormatError, match=r"umnsrs\.txt:2: expected 'term1<TAB>term2<TAB>score'"):
        ds.read_umnsrs(umn)


@pytest.mark.parametrize("text,n,parts", [
    ("breast and ovarian cancer", 2, ["breast cancer", "ovarian cancer"]),
    ("colorectal, endometrial, and ovarian cancers", 3, ["colorectal cancers", "endometrial cancers", "ovarian cancers"]),
    ("carcinoma of the breast and ovary", 2, ["carcinoma of breast", "carcinoma of ovary"]),
    ("deficiency of C6 and C7", 2, ["deficiency of C6 and C7"]),  # BioSyn's word pattern has no digits
    ("breast/ovarian cancer", 2, ["breast", "ovarian cancer"]),
    ("ataxia telangiectasia", 2, ["ataxia", "telangiectasia"]),
    ("breast and ovarian cancer", 3, ["breast and ovarian cancer"]),
    ("G6PD deficiency", 1, ["G6PD deficiency"]),
])
def test_split_composite(text, n, parts):
    assert split_composite(text, n) == parts


def test_composite_gold_drops_auxiliary_omim():
    assert composite_gold(["D020388", "OMIM:310200"]) == ["D020388"]
    assert composite_gold(["OMIM:1", "OMIM:2"]) == ["OMIM:1", "OMIM:2"]


def test_normaliser():
    normalise = TextNormaliser({"hemmorhage": "haemorrhage"})
    assert normalise("Cerebral Hemmorhage (ICH), type-2") == "cerebral haemorrhage ich type 2"


def test_standard_queries_resolve_abbreviations_and_split(pubtator):
    corpus = ds.read_pubtator(pubtator)
    abbreviations = document_abbreviations(corpus.documents)
    assert abbreviations["111"] == {"DMD": "Duchenne muscular dystrophy"}
    queries = build_queries(corpus.mentions, "standard", abbreviations)
    assert queries[1].parts == ["duchenne muscular dystrophy"]
    assert queries[2].parts == ["breast cancer", "ovarian cancer"] and queries[2].gold == ["D001943", "D010051"]
    assert queries[3].gold == ["D020388"]
    lenient = build_queries(corpus.mentions, "lenient")
    assert lenient[1].parts == ["DMD"] and lenient[3].gold == ["D020388", "OMIM:310200"]


def test_abbreviations_defined_before_a_hyphen():
    text = ("Rats got nitroglycerin (NTG)-induced headache. NTG was given with the "
            "Na(+)/H(+) exchanger type 3 (NHE3) blocked.")
    found = document_abbreviations([ds.Document("1", text)])["1"]
    assert found["NTG"] == "nitroglycerin" and found["NHE3"] == "Na(+)/H(+) exchanger type 3"


def test_dictionary_additions_per_protocol(pubtator):
    mentions = ds.read_pubtator(pubtator).mentions
    assert ("D010051", "breast and ovarian cancer") in dictionary_additions(mentions, "lenient")
    standard = dictionary_additions(mentions, "standard")
    assert ("D020388", "dmd") in standard and all(i != "D010051" for i, _ in standard)


def test_a_composite_the_corpus_splits_gives_each_part_to_its_id(tmp_path):
    """BC5CDR's seventh column splits a composite in the ids' order: each part joins the
    standard dictionary under its own id; a split whose count differs from the ids' is ignored."""
    path = tmp_path / "cdr.txt"
    path.write_text("1|t|Hemorrhagic cystitis and renal and hepatic failure.\n1|a|x\n"
                    "1\t0\t20\tHemorrhagic cystitis\tDisease\tD006470|D003556\themorrhagic|cystitis\n"
                    "1\t25\t51\trenal and hepatic failure.\tDisease\tD058186|D017093\trenal failure\n")
    split, unsplit = ds.read_pubtator(path).mentions
    assert split.parts == ["hemorrhagic", "cystitis"] and unsplit.parts == []
    assert dictionary_additions([split, unsplit], "standard") == [("D006470", "hemorrhagic"), ("D003556", "cystitis")]
    assert ("D006470", "Hemorrhagic cystitis") in dictionary_additions([split], "lenient")


def test_training_names_go_to_the_concept_training_gives_them():
    kb = KnowledgeBase([
        Concept("D006505", "hepatitis", ["liver inflammation"], types=["MEDIC"]),
        Concept("D056486", "drug induced liver injury", types=["MEDIC"]),
        Concept("D1", "Hepatitis"),  # its only name: kept, or it could not be found at all
    ])
    # The majority (D056486) takes the name; the minority annotation adds nothing back.
    additions = [("D056486", "hepatitis"), ("D056486", "hepatitis"), ("D006505", "hepatitis"), ("D1", "hep")]
    claimed = add_training_names(kb, additions)
    names = {c.concept_id: c.names for c in claimed}
    assert names == {"D006505": ["liver inflammation"], "D056486": ["drug induced liver injury", "hepatitis"],
                     "D1": ["Hepatitis", "hep"]}
    assert claimed.cui_to_entity["D006505"].types == ["MEDIC"] and len(kb.cui_to_entity["D006505"].names) == 2
    assert ExactMatch(claimed).rank(["hepatitis"]) == [["D056486", "D1"]]
    # Equal votes: both concepts keep the name.
    tied = add_training_names(kb, [("D056486", "hepatitis"), ("D006505", "hepatitis")])
    assert "hepatitis" in tied.cui_to_entity["D006505"].names and "hepatitis" in tied.cui_to_entity["D056486"].names
    # Without precedence every pair is added and every concept keeps its names (ties by row order).
    plain = add_training_names(kb, additions, precedence=False)
    assert plain.cui_to_entity["D006505"].names == ["hepatitis", "liver inflammation"]
    assert "hepatitis" in plain.cui_to_entity["D056486"].names and ExactMatch(plain).rank(["hepatitis"])[0][0] == "D006505"


def test_accuracy_at_k_by_hand():
    rankings = [
        [["A", "B"]],                 # right at 1
        [["B", "A"]],                 # right at 2
        [["A"], ["C", "D", "E"]],     # composite: second part right only at 3
        [["X", "Y"]],                 # never right
    ]
    golds = [{"A"}, {"A"}, {"A", "E"}, {"A"}]
    assert accuracy_at_k(rankings, golds, max_k=3) == [0.25, 0.5, 0.75]


def test_evaluate_linking_end_to_end():
    kb = KnowledgeBase([Concept("D1", "fever", ["pyrexia"]), Concept("D2", "headache", ["cephalalgia"]),
                        Concept("C3", "Tooth agenesis", alt_ids=["OMIM:613097"])])
    mentions = [ds.Mention("1", 0, 5, t, "Disease", ids) for t, ids in
                [("fever", ["D1"]), ("Pyrexia", ["D1"]), ("cephalalgias", ["D2"]), ("tooth agenesis", ["OMIM:613097"])]]
    task = Task(build_queries(mentions, "lenient"), kb)
    exact = evaluate_linking(task, ExactMatch(kb))
    assert exact["acc@1"] == 0.75 and exact["n"] == 4 and exact["n_gold_reachable"] == 4
    assert evaluate_linking(task, CharTfidf(kb))["acc@1"] == 1.0


def test_report_writes_summary_and_plot(tmp_path):
    from spacy_sapbert_training.evaluation.report import plot_accuracy_at_k, write_summary

    for system, acc in (("tfidf", 0.8), ("model", 0.9)):
        metrics = {"dataset": "ncbi-disease", "split": "dev", "system": system, "protocol": "lenient", "n": 10,
                   "model": "runs/x" if system == "model" else None, "precision": "int8",
                   "acc@1": acc, "acc@1_reachable": acc, "acc@5": 0.95, "acc@k": [acc] + [0.95] * 9,
                   "n_gold_reachable": 10, "mentions_per_s": 100.0}
        (tmp_path / f"{system}.json").write_text(json.dumps(metrics))
    summary = write_summary(tmp_path).read_text()
    assert "| ncbi-disease | dev | lenient | model | runs/x (int8) | 10 | 90.0 | 90.0 | 95.0 | 10 | 100 |" in summary
    [png] = plot_accuracy_at_k(tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_model_results_are_filed_under_the_model_and_its_files(tiny_model, tmp_path):
    import shutil

    from spacy_sapbert_training.evaluation.report import model_key

    copy = shutil.copytree(tiny_model, tmp_path / "model")
    first = model_key(str(copy), "int8")
    assert "-int8-" in first
    assert model_key(str(copy), "fp32") != first
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")  # the model changed
    assert model_key(str(copy), "int8") != first


def test_drug_names_join_the_concept_of_their_canonical_drug(monkeypatch):
    kb = KnowledgeBase([
        Concept("D007741", "Labetalol", ["Labetolol"]),
        Concept("D000639", "Amitriptyline"),
        Concept("C000001", "trandate salt"),
    ])
    from spacy_sapbert.kb import drug_names

    monkeypatch.setattr(drug_names, "drug_name_variants", lambda: {
        "labetalol": ["dilevalol", "Trandate-Salt", "apo-labetalol", "apo labetalol"],
        "Amitriptyline": ["elavil"],
        "unknown drug": ["nothing"],
    })
    out = drug_names.add_drug_names(kb)
    # MeSH's own naming stays: "trandate salt" is C000001's, so labetalol does not take it;
    # two spellings of one name join once.
    assert out.cui_to_entity["D007741"].aliases == ["Labetolol", "apo-labetalol", "dilevalol"]
    assert out.cui_to_entity["D000639"].aliases == ["elavil"]
    assert out.cui_to_entity["C000001"].aliases == []
    assert len(out) == len(kb) and out.name.endswith("+drug-names")


def test_drug_name_variants_read_from_the_pinned_wheel():
    from spacy_sapbert.kb.drug_names import drug_name_variants

    variants = drug_name_variants()
    assert "elavil" in variants["amitriptyline"]
    assert "dilevalol" in variants["labetalol"]


def test_acc_at_1_over_reachable_queries_stands_beside_the_headline():
    kb = KnowledgeBase([Concept("D1", "fever", ["pyrexia"]), Concept("D2", "headache")])
    mentions = [ds.Mention("1", 0, 5, t, "Chemical", ids) for t, ids in
                [("fever", ["D1"]), ("headache", ["D2"]), ("cough", ["D2"]), ("quetiapine", ["C069541"])]]
    metrics = evaluate_linking(Task(build_queries(mentions, "lenient"), kb), ExactMatch(kb))
    # C069541 is a retired id the dictionary lacks: 2 of 4 right, 2 of the 3 reachable
    assert (metrics["acc@1"], metrics["n_gold_reachable"]) == (0.5, 3)
    assert metrics["acc@1_reachable"] == pytest.approx(2 / 3)


def test_train_folds_split_the_documents_and_learn_from_the_others():
    from spacy_sapbert_training.data.protocol import TRAIN_FOLDS, train_fold

    docs = [ds.Document(f"{i:03d}", "x", [ds.Mention(f"{i:03d}", 0, 1, f"m{i}", "Disease", ["D1"])]) for i in range(12)]
    corpus = ds.Corpus(list(reversed(docs)))
    held = [train_fold(corpus, fold) for fold in range(TRAIN_FOLDS)]
    ids = [doc.doc_id for fold, _ in held for doc in fold.documents]
    assert sorted(ids) == [d.doc_id for d in docs]  # every document in exactly one fold
    for fold, others in held:
        assert {m.text for m in others} == {m.text for d in docs for m in d.mentions} - {m.text for m in fold.mentions}
    with pytest.raises(ValueError, match=r"^fold 5 is not a train fold; give 0 to 4\."):
        train_fold(corpus, TRAIN_FOLDS)


def test_a_held_out_train_fold_leaves_the_queries_and_the_dictionary(monkeypatch):
    from spacy_sapbert_training.data.protocol import fold_split, prepare

    docs = [ds.Document(f"{i:03d}", f"m{i}", [ds.Mention(f"{i:03d}", 0, 2, f"m{i}", "Disease", ["D1"])])
            for i in range(10)]
    monkeypatch.setattr(ds, "load_pubtator_split", lambda dataset, split, data_dir: ds.Corpus(list(docs)))
    monkeypatch.setattr(ds, "base_dictionary", lambda *args, **kwargs: KnowledgeBase([Concept("D1", "fever")]))
    held = {d.mentions[0].text for d in fold_split(docs, 0, key=lambda doc: doc.doc_id)[0]}
    task = prepare("bc5cdr-disease", "train", "standard", Path("."), held_out_fold=0)
    assert {q.parts[0] for q in task.queries} == {f"m{i}" for i in range(10)} - held
    assert not held & set(task.dictionary.name_lookup()) and "m1" in task.dictionary.name_lookup()
    with pytest.raises(ValueError, match="held_out_fold applies to the train split"):
        prepare("bc5cdr-disease", "dev", "standard", Path("."), held_out_fold=0)


def test_the_tfidf_baseline_breaks_ties_in_dictionary_order_taking_none_of_the_linkers_rules():
    kb = KnowledgeBase([Concept("OMIM:160900", "DM"), Concept("D009223", "DM", ["myotonic dystrophy"]),
                        Concept("D3", "diabetes")])
    assert CharTfidf(kb).rank(["DM"], k=2) == [["OMIM:160900", "D009223"]]  # the linker's tie rule puts the later first
