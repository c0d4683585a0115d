"""Definitions scispaCy's AbbreviationDetector misses, added by abbreviations.missed_definitions
for the harness (document_abbreviations) and the pipe (long_forms) alike."""
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_sapbert_training.data import datasets as ds
from spacy_sapbert.mentions.abbreviations import expand_abbreviations, linked_text, short_form_segments
from spacy_sapbert_training.data.protocol import build_queries, document_abbreviations

from conftest import SHARED_DATA, ruler_nlp


def defined(text, missed=True):
    return document_abbreviations([ds.Document("1", text)], missed=missed)["1"]


@pytest.mark.parametrize("text, short, long_form", [
    ("the effect of phenobarbital (PB: 15 mg/kg) on rats", "PB", "phenobarbital"),
    ("given diethylnitrosamine (DEN; 10 mg/kg/day) daily", "DEN", "diethylnitrosamine"),
    ("rats treated with testosterone (T, 5 mg) were", "T", "testosterone"),
    ("Serum prolactin (PRL) and testosterone (T) fell.", "T", "testosterone"),
    ("deaths from cocaine-induced excited delirium (EDDs) were", "EDDs", "excited delirium"),
    # Schwartz & Hearst alone stop at "adenomatous": the word before with the initial joins
    ("kindreds with attenuated adenomatous polyposis coli (AAPC; n = 3) were", "AAPC",
     "attenuated adenomatous polyposis coli"),
])
def test_definitions_the_detector_misses(text, short, long_form):
    assert short not in defined(text, missed=False)
    assert defined(text)[short] == long_form


def test_a_plural_short_form_defines_its_singular():
    found = defined("NSAIDs induce ventricular septal defects (VSDs) in rats. One VSD was large.")
    assert found["VSDs"] == found["VSD"] == "ventricular septal defects"


@pytest.mark.parametrize("text", [
    "Five months after starting nifedipine (Adalat) she fell.",  # a brand name, not a short form
    "rats got saline (C) twice",  # one letter must be the initial of the word before
    "intravenous thyroxine (T4) was given",  # the digit is in no word before
    "as shown before (see Methods) the",
    # a long form ending in a function word is no name: "Na" is no "Na+-binding properties of the"
    "deteriorated Na+-binding properties of the (Na,K)-ATPase",
])
def test_what_is_not_a_definition(text):
    assert defined(text) == defined(text, missed=False)


def test_the_detectors_own_definitions_stand():
    text = "Acute renal failure (ARF) was seen. Later ARF recurred."
    assert defined(text) == defined(text, missed=False) == {"ARF": "Acute renal failure"}


@pytest.mark.parametrize("text, short, long_form", [
    # Schwartz & Hearst take the shortest match: the words before whose initials spell it win
    ("among women on combined oral contraceptives (COCs). COC users", "COCs", "combined oral contraceptives"),
    ("Hereditary hemochromatosis (HH) is common", "HH", "Hereditary hemochromatosis"),
    ("inhibitors of poly(ADP-ribose) polymerase (PARP) protect", "PARP", "poly(ADP-ribose) polymerase"),
    # a chemical name is whole with the locants and letters it opens with
    ("of mGluR5, 2-methyl-6-(phenylethynyl)pyridine (MPEP) was", "MPEP", "2-methyl-6-(phenylethynyl)pyridine"),
    ("Rats were given 3-mercaptopropionic acid (MPA) daily.", "MPA", "3-mercaptopropionic acid"),
    ("the gamma-glutamyltransferase (GT) rose", "GT", "gamma-glutamyltransferase"),
    # a word before the hyphen that is no locant stays out
    ("by RT-PCR/restriction enzyme (RE) analysis", "RE", "restriction enzyme"),
])
def test_long_forms_put_right(text, short, long_form):
    assert defined(text, missed=False)[short] == defined(text)[short] == long_form
    if short == "COCs":  # and the singular takes it
        assert defined(text)["COC"] == long_form


@pytest.mark.parametrize("text, short", [
    ("the most striking of carboplatin's advantages (CBDCA) over cisplatin (CDDP) is", "CDDP"),
    ("patients with type 1 (insulin-dependent) diabetes mellitus (IDDM) were", "IDDM"),
])
def test_a_long_form_across_a_parenthesis_is_no_definition(text, short):
    assert short not in defined(text, missed=False) and short not in defined(text)


@pytest.mark.parametrize("text, expected", [
    ("the hyperparathyroidism-jaw tumor syndrome (HPT-JT) and primary HPT",
     {"HPT": "hyperparathyroidism", "JT": "jaw tumor"}),
    ("boys with X-linked adrenoleukodystrophy (X-ALD). Cerebral ALD", {"ALD": "adrenoleukodystrophy"}),
    ("rats with glucocorticoid-induced hypertension (GC-HT). HT fell.",
     {"GC": "glucocorticoid", "HT": "hypertension"}),
    ("dexamethasone-induced hypertension (dex-HT) in rats", {"HT": "hypertension"}),  # "dex": no short form
])
def test_the_parts_of_a_hyphenated_short_form_take_their_words_of_the_long_form(text, expected):
    found = defined(text)
    assert {short: found[short] for short in expected} == expected
    assert {short for short in found if "-" not in short} == set(expected)


def test_a_hyphenated_short_form_that_splits_two_ways_gives_no_parts():
    doc = spacy.blank("en")("alpha beta cell cd death")
    # "CD" could start at "cell" or at "cd"
    assert short_form_segments({"AB-CD": doc[:]}) == {}
    assert short_form_segments({"AB-CDE": doc[:]}) == {}  # no "e" after "cd": no way at all


def test_a_part_after_a_number_is_no_short_form():
    doc = spacy.blank("en")("5-hydroxytryptamine")
    assert short_form_segments({"5-HT": doc[:]}) == {}


def test_a_part_defined_itself_keeps_its_own_definition():
    found = defined("Adrenoleukodystrophy (ALD) in men; X-linked adrenoleukodystrophy (X-ALD) in boys")
    assert found["ALD"] == "Adrenoleukodystrophy"


@pytest.mark.parametrize("serializable", [False, True])
def test_the_pipe_links_a_missed_short_form_as_its_long_form(tiny_model, tiny_index_dir, serializable):
    import scispacy.abbreviation  # noqa: F401

    nlp = ruler_nlp([("Chemical", "metformin"), ("Chemical", "M")])
    nlp.add_pipe("abbreviation_detector", config={"make_serializable": serializable})
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)},
                                           "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
    doc = nlp("Rats got metformin (M: 5 mg/kg) daily, and M lowered glucose.")
    # scispaCy's detector finds no one-letter short form; "M" alone links to aspirin here
    assert [(e.text, e._.cui) for e in doc.ents] == [("metformin", "D008687"), ("M", "D008687"), ("M", "D008687")]



def test_the_pipe_links_a_part_of_a_hyphenated_short_form_as_its_words(tiny_model, tiny_index_dir):
    import scispacy.abbreviation  # noqa: F401

    nlp = ruler_nlp([("Disease", "glucocorticoid-induced hypertension"), ("Disease", "GC-HT"), ("Disease", "HT")])
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)},
                                           "index": {"index": str(tiny_index_dir)}, "threshold": 0.0})
    doc = nlp("Rats with glucocorticoid-induced hypertension (GC-HT) were given salt; HT rose.")
    assert [(e.text, e._.cui) for e in doc.ents][-1] == ("HT", "D006973")


def test_without_a_detector_before_the_pipe_nothing_is_resolved(tiny_model, tiny_index_dir):
    """The extension another pipeline's detector registered is no reason to resolve: the same
    text links alike with or without that other pipeline in the process."""
    import scispacy.abbreviation  # noqa: F401

    text = "Rats got metformin (M: 5 mg/kg) daily, and M lowered glucose."
    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0}
    with_detector = ruler_nlp([("Chemical", "metformin"), ("Chemical", "M")])
    with_detector.add_pipe("abbreviation_detector")
    with_detector.add_pipe("sapbert_linker", config=config)
    without = ruler_nlp([("Chemical", "metformin"), ("Chemical", "M")])
    without.add_pipe("sapbert_linker", config=config)
    after = ruler_nlp([("Chemical", "metformin"), ("Chemical", "M")])
    after.add_pipe("sapbert_linker", config=config)
    after.add_pipe("abbreviation_detector")
    assert [e._.cui for e in with_detector(text).ents] == ["D008687"] * 3
    assert [e._.cui for e in without(text).ents][1:] == [e._.cui for e in after(text).ents][1:] != ["D008687"] * 2


def used_without_definition(text, mentions, missed=True, names=None):
    """document_abbreviations with `mentions` (texts, each at its first place in `text`) as
    the document's entities; `names`: the dictionary's names, if it is asked."""
    found = [ds.Mention("1", text.index(m), text.index(m) + len(m), m, "Disease", ["D1"]) for m in mentions]
    is_name = None if names is None else (lambda written: written in names)
    return document_abbreviations([ds.Document("1", text, found)], missed=missed, is_name=is_name)["1"]


@pytest.mark.parametrize("text, mentions, short, long_form", [
    # never defined in a parenthesis; "A" comes from inside "overactive", as Schwartz & Hearst allow
    ("Urine of women with overactive bladder. We studied OAB in 65 women.",
     ["overactive bladder", "OAB"], "OAB", "overactive bladder"),
    ("Insulin-dependent diabetes mellitus is common. IDDM was seen in 7.",
     ["Insulin-dependent diabetes mellitus", "IDDM"], "IDDM", "Insulin-dependent diabetes mellitus"),
])
def test_a_short_form_used_without_definition_takes_the_entity_it_abbreviates(text, mentions, short, long_form):
    assert short not in used_without_definition(text, mentions, missed=False)
    assert used_without_definition(text, mentions)[short] == long_form


@pytest.mark.parametrize("text, mentions", [
    # letters match, but the initials of "DMPK deficient" are D, D: DM does not spell them
    ("DMPK deficient mice. DM patients.", ["DMPK deficient", "DM"]),
    # two entities it could abbreviate: none is chosen
    ("acute renal failure and acute rheumatic fever; ARF.", ["acute renal failure", "acute rheumatic fever", "ARF"]),
    # a one-word entity is no long form unless the dictionary can be asked
    ("Metformin. MET", ["Metformin", "MET"]),
])
def test_no_entity_to_abbreviate(text, mentions):
    assert used_without_definition(text, mentions) == used_without_definition(text, mentions, missed=False) == {}


@pytest.mark.parametrize("text, mentions, short, word", [
    ("Tacrolimus was given. TAC levels rose.", ["Tacrolimus", "TAC"], "TAC", "Tacrolimus"),
    # a plural's "s" aside
    ("Use of benzodiazepines in the old. BZDs and falls.", ["benzodiazepines", "BZDs"], "BZDs", "benzodiazepines"),
])
def test_a_short_form_no_name_knows_takes_the_one_word_it_abbreviates(text, mentions, short, word):
    assert short not in used_without_definition(text, mentions)
    assert used_without_definition(text, mentions, names=set())[short] == word


@pytest.mark.parametrize("text, mentions, names", [
    # a name of the dictionary is read as that name: "ATP" is no "atropine"
    ("Atropine was given. ATP fell.", ["Atropine", "ATP"], {"ATP"}),
    # two letters are found in order in too many words to tell
    ("Nitroglycerin was given. NO rose.", ["Nitroglycerin", "NO"], set()),
    # two words it could abbreviate: none is chosen
    ("Tacrolimus and tacalcitol. TAC.", ["Tacrolimus", "tacalcitol", "TAC"], set()),
    # the word must start with the short form's first letter
    ("Cyclosporine. SPR.", ["Cyclosporine", "SPR"], set()),
])
def test_no_one_word_to_abbreviate(text, mentions, names):
    assert used_without_definition(text, mentions, names=names) == {}


def test_a_definition_in_the_text_is_kept_over_an_entity():
    text = "Acute renal failure (ARF) and acute rheumatoid fever. ARF."
    found = used_without_definition(text, ["Acute renal failure", "acute rheumatoid fever", "ARF"])
    assert found == {"ARF": "Acute renal failure"}


def test_the_pipe_links_a_short_form_used_without_definition(tiny_model, tiny_index_dir):
    import scispacy.abbreviation  # noqa: F401

    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0}
    nlp = ruler_nlp([("Chemical", "acetylsalicylic acid"), ("Chemical", "ASA")])
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config=config)
    doc = nlp("Rats got acetylsalicylic acid daily. ASA lowered pain.")
    assert [(e.text, e._.cui) for e in doc.ents] == [("acetylsalicylic acid", "D001241"), ("ASA", "D001241")]


def test_the_pipe_links_a_short_form_of_one_word_used_without_definition(tiny_model, tiny_index_dir):
    import scispacy.abbreviation  # noqa: F401

    config = {"encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0}
    # "IDDM" is a name of the index: it keeps its own link, though "indandermatosis" holds I, D, D, M
    nlp = ruler_nlp([("Chemical", "Metformin"), ("Chemical", "MTF"), ("Disease", "indandermatosis"), ("Disease", "IDDM")])
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config=config)
    doc = nlp("Metformin was given. MTF lowered glucose. No indandermatosis; IDDM was seen.")
    assert [(e.text, e._.cui) for e in doc.ents][:2] == [("Metformin", "D008687"), ("MTF", "D008687")]
    assert (doc.ents[3].text, doc.ents[3]._.cui) == ("IDDM", "D003922")


@pytest.mark.parametrize("text, abbreviations, expected", [
    # the short form in parentheses after its own long form is the definition: dropped, not repeated
    ("glucose-6-phosphate dehydrogenase (G6PD) deficiency", {"G6PD": "glucose-6-phosphate dehydrogenase"},
     "glucose-6-phosphate dehydrogenase deficiency"),
    ("Hepatitis B virus ( HBV ) infection", {"HBV": "hepatitis B virus"}, "Hepatitis B virus infection"),
    # after anything else it carries the meaning, so it is expanded
    ("this syndrome (SJS)", {"SJS": "Schwartz-Jampel syndrome"}, "this syndrome (Schwartz-Jampel syndrome)"),
    ("G6PD deficiency", {"G6PD": "glucose-6-phosphate dehydrogenase"}, "glucose-6-phosphate dehydrogenase deficiency"),
    # the long form's last word, written again after the short form, stays once
    ("HPT-JT syndrome", {"HPT-JT": "hyperparathyroidism-jaw tumor syndrome"}, "hyperparathyroidism-jaw tumor syndrome"),
    ("L-N Syndrome in boys", {"L-N": "Lesch-Nyhan syndrome"}, "Lesch-Nyhan Syndrome in boys"),
    ("HT hypertension", {"HT": "hypertension"}, "hypertension hypertension"),  # one word: as written
])
def test_expand_abbreviations(text, abbreviations, expected):
    assert expand_abbreviations(text, abbreviations) == expected


def test_a_mention_the_dictionary_holds_as_written_is_not_expanded():
    abbreviations = {"GALC": "galactosylceramidase", "PD": "Parkinson's disease"}
    names = {"diminished galc activity", "pd"}.__contains__
    is_name = lambda text: names(text.lower())
    assert linked_text("diminished GALC activity", abbreviations, is_name) == "diminished GALC activity"
    assert linked_text("GALC deficiency", abbreviations, is_name) == "galactosylceramidase deficiency"
    # a bare short form is a name of many concepts: its definition says which
    assert linked_text("PD", abbreviations, is_name) == "Parkinson's disease"


def test_an_element_symbol_is_linked_as_the_elements_name_when_the_dictionary_holds_it():
    names = {"sodium", "potassium", "cobalt", "carbon monoxide"}
    is_name = lambda text: text.lower() in names
    assert linked_text("Na", {}, is_name) == "sodium"
    assert linked_text("Co", {}, is_name) == "cobalt"
    # case and all: "CO" is carbon monoxide, "NA" no element, "na" as written
    assert [linked_text(t, {}, is_name) for t in ("CO", "NA", "na", "Na+")] == ["CO", "NA", "na", "Na+"]
    # a dictionary without the name (a disease vocabulary) keeps the symbol
    assert linked_text("Li", {}, is_name) == "Li"
    # the text's own definition comes first
    assert linked_text("K", {"K": "kanamycin"}, is_name) == "kanamycin"


def test_the_harness_keeps_a_dictionary_name_as_written():
    text = "Galactosylceramidase (GALC) is an enzyme. Mice with diminished GALC activity and GALC loss."
    mentions = [ds.Mention("1", text.index(m), text.index(m) + len(m), m, "Disease", ["D1"])
                for m in ["diminished GALC activity", "GALC loss"]]
    abbreviations = document_abbreviations([ds.Document("1", text, mentions)])
    queries = build_queries(mentions, "standard", abbreviations, is_name={"diminished galc activity"}.__contains__)
    assert [q.parts for q in queries] == [["diminished galc activity"], ["galactosylceramidase loss"]]


def test_the_pipe_keeps_a_name_of_the_index_as_written(tmp_path, tiny_model, tiny_encoder):
    import json

    import scispacy.abbreviation  # noqa: F401

    from spacy_sapbert.search.index import ConceptIndex
    from spacy_sapbert.kb.formats import read_jsonl

    concepts = [{"concept_id": "C538554", "canonical_name": "diminished GALC activity", "aliases": [], "types": ["C10"]},
                {"concept_id": "D007965", "canonical_name": "galactosylceramidase deficiency",
                 "aliases": ["diminished galactosylceramidase activity"], "types": ["C10"]}]
    (tmp_path / "kb.jsonl").write_text("".join(json.dumps(c) + "\n" for c in concepts))
    index_dir = ConceptIndex.build(read_jsonl(tmp_path / "kb.jsonl", name="galc"), tiny_encoder).save(tmp_path / "index")
    nlp = ruler_nlp([("Disease", "diminished GALC activity"), ("Disease", "Galactosylceramidase")])
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model), "precision": "fp32"},
                                           "index": {"index": str(index_dir)}, "threshold": 0.0})
    doc = nlp("Galactosylceramidase (GALC) is an enzyme. Mice with diminished GALC activity.")
    assert [(e.text, e._.cui) for e in doc.ents][-1] == ("diminished GALC activity", "C538554")


def _position(abbreviation: dict) -> tuple:
    return abbreviation["short_start"], abbreviation["long_start"], abbreviation["short_text"]


@pytest.mark.skipif(not (SHARED_DATA / "bc5cdr").exists(), reason="needs ../shared/data")
def test_the_copied_detector_finds_what_scispacys_finds():
    """mentions/schwartz_hearst.py is scispaCy 0.6.2's detector, for a runtime without scispaCy: the
    two find the same short forms and long forms over the 500 BC5CDR dev abstracts."""
    from scispacy.abbreviation import AbbreviationDetector as Theirs

    from spacy_sapbert.mentions.schwartz_hearst import AbbreviationDetector as Ours

    nlp = spacy.blank("en")
    ours, theirs = Ours(nlp, make_serializable=True), Theirs(nlp, make_serializable=True)
    corpus = ds.load_pubtator_split("bc5cdr-chemical", "dev", SHARED_DATA)
    found = 0
    for document in corpus.documents:
        first, second = ours(nlp.make_doc(document.text))._.abbreviations, theirs(nlp.make_doc(document.text))._.abbreviations
        # Both list a long form's short forms from a set of Spans, whose order follows the Doc's
        # address in memory: compared as sets of occurrences, not in list order.
        assert sorted(first, key=_position) == sorted(second, key=_position)
        found += len(first)
    assert found > 500


def test_without_scispacy_the_factory_is_the_copy_and_resolves_short_forms():
    """With scispaCy not importable, add_pipe("abbreviation_detector") finds the copy through the
    package's entry point, and the linker's long forms use it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['scispacy'] = None\n"
        "import spacy\n"
        "nlp = spacy.blank('en')\n"
        "detector = nlp.add_pipe('abbreviation_detector')\n"
        "assert type(detector).__module__ == 'spacy_sapbert.mentions.schwartz_hearst', type(detector)\n"
        "doc = nlp('Patients with non-insulin-dependent diabetes mellitus (NIDDM) took it.')\n"
        "from spacy_sapbert.mentions.abbreviations import long_forms\n"
        "print({s: f.text for s, f in long_forms(doc).items()})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'NIDDM': 'non-insulin-dependent diabetes mellitus'" in out.stdout


@pytest.mark.parametrize("text, entity, short, long_form, expected", [
    # a modifier before the entity: the entity is the long form's head, and widens to it
    ("in non-insulin-dependent diabetes mellitus (NIDDM) it", "diabetes mellitus", "NIDDM",
     "non-insulin-dependent diabetes mellitus", "non-insulin-dependent diabetes mellitus"),
    # a function word before it: the short form names something else, and the entity stays
    ("inhibitors of the mammalian target of rapamycin (mTOR) were", "rapamycin", "mTOR",
     "mammalian target of rapamycin", "rapamycin"),
    ("the Deleted in Colorectal Cancer (DCC) gene", "Colorectal Cancer", "DCC",
     "Deleted in Colorectal Cancer", "Colorectal Cancer"),
])
def test_an_entity_widens_to_the_long_form_it_heads(text, entity, short, long_form, expected):
    from spacy_sapbert.mentions.abbreviations import follow_long_forms

    doc = spacy.blank("en")(text)
    start = text.index(entity)
    ents = [doc.char_span(start, start + len(entity), label="Chemical")]
    form = doc.char_span(text.index(long_form), text.index(long_form) + len(long_form))
    assert [e.text for e in follow_long_forms(ents, {short: form})] == [expected]


def _entities(doc, *spans):
    return [doc.char_span(doc.text.index(text), doc.text.index(text) + len(text), label=label) for text, label in spans]


def test_a_short_form_of_an_entity_becomes_an_entity_wherever_the_text_uses_it():
    from spacy_sapbert.mentions.abbreviations import short_form_entities

    doc = spacy.blank("en")("Grape seed extract (GSPE) was given; GSPE-treated rats and gspe aside, GSPE helped.")
    ents = _entities(doc, ("Grape seed extract", "Chemical"))
    form = ents[0]
    got = short_form_entities(ents, {"GSPE": doc[form.start:form.end]})
    starts = [i for i, token in enumerate(doc) if token.text == "GSPE"]
    assert [(e.start, e.text, e.label_) for e in got] == [(0, "Grape seed extract", "Chemical")] + [
        (i, "GSPE", "Chemical") for i in starts]  # as written: "gspe" is not the short form


def test_a_short_form_whose_long_form_only_begins_an_entity_stays_untagged():
    from spacy_sapbert.mentions.abbreviations import short_form_entities

    doc = spacy.blank("en")("glucose-6-phosphate dehydrogenase (G6PD) deficiency; G6PD activity was low.")
    ents = _entities(doc, ("glucose-6-phosphate dehydrogenase (G6PD) deficiency", "Disease"))
    long_form = doc.char_span(0, len("glucose-6-phosphate dehydrogenase"))
    assert short_form_entities(ents, {"G6PD": long_form}) == ents


def test_a_short_form_tagged_where_defined_is_tagged_again_but_never_over_another_entity():
    from spacy_sapbert.mentions.abbreviations import short_form_entities

    doc = spacy.blank("en")("acute renal failure (ARF) follows; ARF recurs; ARF syndrome too.")
    arf = [i for i, token in enumerate(doc) if token.text == "ARF"]
    ents = [spacy.tokens.Span(doc, arf[0], arf[0] + 1, label="Disease"),
            spacy.tokens.Span(doc, arf[2], arf[2] + 2, label="Disease")]  # "ARF syndrome"
    got = short_form_entities(ents, {"ARF": doc[0:3]})
    assert [(e.start, e.text) for e in got] == [(arf[0], "ARF"), (arf[1], "ARF"), (arf[2], "ARF syndrome")]


def test_an_entitys_text_becomes_an_entity_wherever_the_document_repeats_it():
    from spacy_sapbert.mentions.abbreviations import repeated_entities

    doc = spacy.blank("en")("Cisplatin caused lactic acidosis; cisplatin, then Cisplatin again; acidosis and lactic acidosis.")
    ents = _entities(doc, ("Cisplatin", "Chemical"), ("lactic acidosis", "Disease"))
    ents.append(doc.char_span(doc.text.index("; acidosis") + 2, doc.text.index("; acidosis") + 10, label="Disease"))
    got = [(e.start_char, e.text, e.label_) for e in repeated_entities(ents)]
    later = doc.text.rindex("lactic acidosis")
    assert got == [(0, "Cisplatin", "Chemical"), (17, "lactic acidosis", "Disease"),
                   (doc.text.index("Cisplatin again"), "Cisplatin", "Chemical"),  # as written: "cisplatin" is not it
                   (doc.text.index("; acidosis") + 2, "acidosis", "Disease"),
                   (later, "lactic acidosis", "Disease")]  # the longer text first, not "acidosis" inside it


def test_short_texts_and_texts_of_two_labels_are_not_repeated():
    from spacy_sapbert.mentions.abbreviations import repeated_entities

    doc = spacy.blank("en")("Iron and Na, then Iron and Na; codeine or codeine.")
    at = [i for i, token in enumerate(doc) if token.text in ("Iron", "Na", "codeine")]  # Iron Na Iron Na codeine codeine
    spans = [spacy.tokens.Span(doc, at[i], at[i] + 1, label=label)
             for i, label in [(0, "Chemical"), (1, "Chemical"), (4, "Chemical"), (5, "Disease")]]
    assert repeated_entities(spans) == spans  # "Iron", "Na": under 5 characters; "codeine": two labels
    assert [e.start for e in repeated_entities(spans, min_chars=4)] == [at[0], at[1], at[2], at[4], at[5]]


_VOCAB = spacy.vocab.Vocab()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "ab", "b", "(", ")", "-", "a-b", "ab)"]), min_size=1, max_size=30),
       st.integers(0, 29), st.integers(1, 4), st.lists(st.booleans(), min_size=30, max_size=30))
def test_a_texts_occurrences_are_found_where_every_token_read_would_find_them(words, at, length, spaces):
    """_occurrences looks runs up by their first token's text; reading from every token finds the same."""
    from spacy.tokens import Doc

    from spacy_sapbert.mentions.abbreviations import _occurrences, _token_starts

    doc = Doc(_VOCAB, words=words, spaces=spaces[:len(words)])
    start = at % len(doc)
    text = doc[start:start + length].text  # a run the document holds, read back wherever it recurs
    read = []
    for first in range(len(doc)):
        end, so_far = first + 1, doc[first].text
        while len(so_far) < len(text) and end < len(doc):
            so_far += doc[end - 1].whitespace_ + doc[end].text
            end += 1
        if so_far == text:
            read.append((first, end))
    assert list(_occurrences(doc, text, _token_starts(doc))) == read
