"""Shared fixtures: a tiny BERT and a tiny ontology, built once per session.

With SPACY_SAPBERT_RUNTIME_TESTS=1 the suite runs against the runtime install alone (no extras,
as `pip install spacy-sapbert` gives; scripts/check-wheel.sh runs it so at the dependency floors
and with numpy 2): a test, fixture or module that needs a library only an extra brings (torch,
scikit-learn, scispaCy, pronto, ...) or the training package is skipped, naming it; every other
failure stays a failure.
"""
import os
import re
import string
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

RUNTIME_ONLY = os.environ.get("SPACY_SAPBERT_RUNTIME_TESTS") == "1"
# What the extras bring (setup.cfg's extras_require) and the tests' own tools beyond pytest.
EXTRAS = {"torch", "transformers", "safetensors", "onnx", "ml_dtypes", "pytorch_metric_learning", "pykeen",
          "peft", "accelerate", "confection", "drug_named_entity_recognition", "sklearn", "scipy", "scispacy",
          "pronto", "ray", "pyarrow", "matplotlib", "spacy_sapbert_model",
          # the training package (training/), never part of the runtime install
          "spacy_sapbert_training"}
MISSING_EXTRA = re.compile(r"ModuleNotFoundError: No module named '(\w+)")


def pytest_configure(config):
    if RUNTIME_ONLY:
        import spacy_sapbert

        if "site-packages" not in spacy_sapbert.__file__:
            raise pytest.UsageError(f"SPACY_SAPBERT_RUNTIME_TESTS=1 tests an installed spacy_sapbert, and "
                                    f"{spacy_sapbert.__file__} is the checkout's; run the venv's pytest, not python -m pytest.")


def _needs_extra(text: str):
    """The extra's module a failure's report says is missing, or None."""
    found = MISSING_EXTRA.search(text)
    return found.group(1) if found and found.group(1) in EXTRAS else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if RUNTIME_ONLY and report.failed and call.excinfo is not None and call.excinfo.errisinstance(ModuleNotFoundError):
        module = (call.excinfo.value.name or "").split(".")[0]
        if module in EXTRAS:
            _skipped(report, item.path, item.location[1] or 0, module)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    module = _needs_extra(str(report.longrepr)) if RUNTIME_ONLY and report.failed else None
    if module:
        _skipped(report, collector.path, 0, module)


def _skipped(report, path, line: int, module: str) -> None:
    """Turn a failed report into a skip that names the missing module."""
    report.outcome = "skipped"
    report.longrepr = (str(path), line, f"needs {module}, which the runtime install lacks")

# Tiny ontology: MeSH-like ids and tree numbers, so label_types can restrict candidates.
TINY_CONCEPTS = [
    {"concept_id": "D003924", "canonical_name": "Diabetes Mellitus, Type 2",
     "aliases": ["type 2 diabetes", "NIDDM", "non-insulin-dependent diabetes mellitus"],
     "types": ["C18.452.394.750.149", "C19.246.300"]},
    {"concept_id": "D003922", "canonical_name": "Diabetes Mellitus, Type 1",
     "aliases": ["type 1 diabetes", "IDDM", "insulin-dependent diabetes mellitus"],
     "types": ["C19.246.267"]},
    {"concept_id": "D000140", "canonical_name": "Acidosis, Lactic", "aliases": ["lactic acidosis"],
     "types": ["C18.452.076.176.451"]},
    {"concept_id": "D008687", "canonical_name": "Metformin", "aliases": ["dimethylbiguanide", "glucophage"],
     "types": ["D02.078.370.141.450"]},
    {"concept_id": "D002945", "canonical_name": "Cisplatin", "aliases": ["cis-diamminedichloroplatinum", "platinol"],
     "types": ["D01.210.375", "D01.710.100"]},
    {"concept_id": "D058186", "canonical_name": "Acute Kidney Injury", "aliases": ["acute renal failure", "acute kidney failure"],
     "types": ["C12.777.419.780.050"]},
    {"concept_id": "D006973", "canonical_name": "Hypertension", "aliases": ["high blood pressure"],
     "types": ["C14.907.489"]},
    {"concept_id": "D001241", "canonical_name": "Aspirin", "aliases": ["acetylsalicylic acid"],
     "types": ["D02.241.223.100.050"]},
    {"concept_id": "D003920", "canonical_name": "Diabetes Mellitus", "aliases": ["diabetes"],
     "types": ["C18.452.394.750", "C19.246"]},
    {"concept_id": "D009369", "canonical_name": "Neoplasms", "aliases": ["tumour", "tumor", "cancer"],
     "types": ["C04"]},
]


def _tiny_vocab():
    words = set()
    for concept in TINY_CONCEPTS:
        for name in [concept["canonical_name"]] + concept["aliases"]:
            words.update(w.strip(string.punctuation) for w in name.lower().replace("-", " ").split())
    chars = list(string.ascii_lowercase + string.digits + string.punctuation) + ["é", "ü", "α", "β"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    return vocab + sorted(w for w in words if w and w not in vocab)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer, 32-d BERT with a small uncased WordPiece vocabulary, saved to disk.

    It records mean pooling: a randomly initialised BERT's [CLS] vectors are all alike.
    """
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from spacy_sapbert.encoders.settings import write_settings

    path = tmp_path_factory.mktemp("tiny-bert")
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(_tiny_vocab()) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(vocab_file), do_lower_case=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    write_settings(path, pooling="mean")
    return path


@pytest.fixture(scope="session")
def tiny_kb_file(tmp_path_factory) -> Path:
    """The tiny ontology as scispaCy KB JSONL."""
    import json

    path = tmp_path_factory.mktemp("kb") / "tiny_kb.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in TINY_CONCEPTS))
    return path


@pytest.fixture(scope="session")
def tiny_kb(tiny_kb_file):
    from spacy_sapbert.kb.formats import read_jsonl

    return read_jsonl(tiny_kb_file, name="tiny")


@pytest.fixture(scope="session")
def tiny_pairs(tmp_path_factory, tiny_kb):
    """Every synonym pair of the tiny ontology, as a pairs file."""
    import itertools

    path = tmp_path_factory.mktemp("pairs") / "pairs.txt"
    lines = []
    for concept in tiny_kb:
        for a, b in itertools.combinations(concept.names, 2):
            lines.append(f"{concept.concept_id}||{a}||{b}\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    return TorchEncoder(tiny_model, batch_size=4)


@pytest.fixture(scope="session")
def tiny_index_dir(tiny_kb, tiny_encoder, tmp_path_factory) -> Path:
    """A flat index over the tiny ontology, saved, with MeSH-style label types."""
    from spacy_sapbert.assets import MESH_LABEL_TYPES
    from spacy_sapbert.search.index import ConceptIndex

    index = ConceptIndex.build(tiny_kb, tiny_encoder)
    index.meta["label_types"] = MESH_LABEL_TYPES
    return index.save(tmp_path_factory.mktemp("tiny-index"))


def ruler_nlp(patterns):
    """A blank English pipeline whose entity ruler tags `patterns` [(label, text), …]."""
    import spacy

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    ruler.add_patterns([{"label": label, "pattern": text} for label, text in patterns])
    return nlp


DEMO_PATTERNS = [
    ("Disease", "type 2 diabetes"), ("Disease", "lactic acidosis"), ("Chemical", "metformin"),
    ("Chemical", "cisplatin"), ("Disease", "acute renal failure"), ("Disease", "NIDDM"),
    ("Disease", "non-insulin-dependent diabetes mellitus"), ("Disease", "tumour"),
]


def demo_linker(model, index_dir, **config):
    """(nlp, pipe): DEMO_PATTERNS tagged by a ruler and linked by `model` (fp32) over the index
    at `index_dir`, every mention linked (threshold 0), with `config` on top."""
    nlp = ruler_nlp(DEMO_PATTERNS)
    pipe = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(model), "precision": "fp32"}, "index": {"index": str(index_dir)},
        "threshold": 0.0, **config})
    pipe.initialize()
    return nlp, pipe


@pytest.fixture
def linked_nlp(tiny_model, tiny_index_dir):
    """A ruler + sapbert_linker pipeline over the tiny model and index."""
    nlp = ruler_nlp(DEMO_PATTERNS)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model)}, "index": {"index": str(tiny_index_dir)}, "threshold": 0.0, "k": 5,
    })
    linker.initialize()  # nlp.initialize() would also reset the ruler's patterns
    return nlp
