"""The int8/fp32 ONNX encoder: same vectors as the torch model, same fingerprint, clear errors."""
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
from conftest import TINY_CONCEPTS

from spacy_sapbert.encoders.base import EncoderError
from spacy_sapbert.encoders.loading import load_encoder
from spacy_sapbert.encoders.onnx import ONNX_META, OnnxEncoder, is_onnx_dir
from spacy_sapbert.encoders.export import exported_model, export_onnx
from spacy_sapbert.ranking.concepts import search_concepts

TEXTS = ["Lactic acidosis", "type 2 diabetes", "", "  ", "ÄB-12 café naïve β-blocker", "x" * 300,
         "non-insulin-dependent diabetes mellitus (NIDDM)"]


@pytest.fixture(scope="module")
def onnx_dirs(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    return {p: export_onnx(tiny_model, root / p, precision=p) for p in ("fp32", "int8")}


def test_fp32_export_gives_the_torch_vectors(onnx_dirs, tiny_encoder):
    onnx = OnnxEncoder(onnx_dirs["fp32"], batch_size=3)
    np.testing.assert_allclose(onnx.encode(TEXTS), tiny_encoder.encode(TEXTS), atol=1e-5)
    assert onnx.fingerprint == tiny_encoder.fingerprint and onnx.dim == tiny_encoder.dim


def test_int8_export_stays_close_and_ranks_alike(onnx_dirs, tiny_encoder, tiny_index_dir):
    from spacy_sapbert.search.index import ConceptIndex

    onnx = OnnxEncoder(onnx_dirs["int8"])
    names = [n for c in TINY_CONCEPTS for n in [c["canonical_name"], *c["aliases"]]]
    cosine = (onnx.encode(names) * tiny_encoder.encode(names)).sum(1)
    assert cosine.min() > 0.95
    # the exact model's index serves the int8 encoder, which answers to the same fingerprint
    index = ConceptIndex.load(tiny_index_dir, encoder=onnx)
    exact = [row[0][0] for row in search_concepts(index, tiny_encoder.encode(names), k=1)]
    quantised = [row[0][0] for row in search_concepts(index, onnx.encode(names), k=1)]
    assert np.mean([a == b for a, b in zip(exact, quantised)]) >= 0.9
    assert (onnx_dirs["int8"] / "model.onnx").stat().st_size < (onnx_dirs["fp32"] / "model.onnx").stat().st_size


def test_tokenizer_matches_transformers(onnx_dirs, tiny_encoder):
    onnx = OnnxEncoder(onnx_dirs["fp32"])
    ours = [e.ids for e in onnx.tokenizer.encode_batch([t or " " for t in TEXTS])]
    # ours pads nothing: encode batches texts of one token length
    theirs = tiny_encoder.tokenizer([t or " " for t in TEXTS], truncation=True, max_length=25)["input_ids"]
    assert ours == theirs


def test_load_encoder_picks_the_backend(onnx_dirs, tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path))
    assert load_encoder(tiny_model, "fp32").precision == "fp32"
    assert isinstance(load_encoder(onnx_dirs["fp32"], "int8"), OnnxEncoder)  # an export loads as itself
    first = load_encoder(tiny_model, "int8")
    assert isinstance(first, OnnxEncoder) and first.path.parent == tmp_path
    stamp = (first.path / "model.onnx").stat().st_mtime_ns
    assert exported_model(tiny_model, "int8", pooling="auto", max_length=25) == first.path  # cached
    assert (first.path / "model.onnx").stat().st_mtime_ns == stamp
    with pytest.raises(EncoderError, match="CPU only"):
        load_encoder(tiny_model, "int8", device="cuda")
    assert load_encoder(tiny_model, "int8", device="auto").path == first.path  # auto: the CPU
    with pytest.raises(EncoderError, match="Unknown precision"):
        load_encoder(tiny_model, "int4")
    with pytest.raises(EncoderError, match=r"^encoder.model .some-org/not-here. is not a folder here"):
        load_encoder("some-org/not-here", "int8")


def test_mismatched_settings_and_damaged_exports_are_refused(onnx_dirs, tmp_path):
    with pytest.raises(EncoderError, match="max_length 25, not 32"):
        OnnxEncoder(onnx_dirs["int8"], max_length=32)
    with pytest.raises(EncoderError, match="mean pooling"):
        OnnxEncoder(onnx_dirs["int8"], pooling="cls")
    with pytest.raises(EncoderError, match="not an exported ONNX encoder"):
        OnnxEncoder(tmp_path)
    import shutil

    broken = shutil.copytree(onnx_dirs["int8"], tmp_path / "broken")
    (broken / "model.onnx").unlink()
    with pytest.raises(EncoderError, match="model.onnx is missing"):
        OnnxEncoder(broken)
    (broken / ONNX_META).write_text("{not json")
    with pytest.raises(EncoderError, match="not valid JSON"):
        OnnxEncoder(broken)


def test_sessions_start_from_a_graph_optimised_once(onnx_dirs, tmp_path, monkeypatch):
    """A session starts from the export's graph as ONNX Runtime optimises it, kept in the cache
    once: the same vectors bit for bit, one row or many; a damaged copy is made again, and
    without a writable cache the session starts from the export's own graph."""
    import onnxruntime

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    path = onnx_dirs["int8"]
    own = OnnxEncoder(path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    own._session = onnxruntime.InferenceSession(str(path / "model.onnx"), options, providers=["CPUExecutionProvider"])
    expected, alone = own.encode(TEXTS), [own.encode([text]) for text in TEXTS]
    [copy] = (tmp_path / "cache").glob("onnx-optimised-*")
    (copy / "model.onnx").write_bytes(b"damaged")
    repaired = OnnxEncoder(path)
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(path / ONNX_META))  # a file, not a folder
    uncached = OnnxEncoder(path)
    assert uncached._session._model_path == str(path / "model.onnx")
    assert repaired._session._model_path == str(copy / "model.onnx")
    for encoder in (repaired, uncached):
        np.testing.assert_array_equal(encoder.encode(TEXTS), expected)
        for text, vector in zip(TEXTS, alone):
            np.testing.assert_array_equal(encoder.encode([text]), vector)


def test_pickled_encoder_encodes_the_same(onnx_dirs):
    onnx = OnnxEncoder(onnx_dirs["int8"])
    copy = pickle.loads(pickle.dumps(onnx))
    np.testing.assert_array_equal(copy.encode(TEXTS), onnx.encode(TEXTS))


def test_int8_linking_never_imports_transformers(onnx_dirs, tiny_index_dir):
    code = (
        "import sys, spacy, spacy_sapbert\n"
        "nlp = spacy.blank('en'); print('faiss._swigfaiss' in sys.modules)\n"
        "nlp.add_pipe('entity_ruler').add_patterns([{'label': 'Disease', 'pattern': 'tumour'}])\n"
        f"linker = nlp.add_pipe('sapbert_linker', config={{'encoder': {{'model': {str(onnx_dirs['int8'])!r}}}, 'index': {{'index': {str(tiny_index_dir)!r}}}, 'threshold': 0.0}})\n"
        "linker.initialize(); doc = nlp('a tumour')\n"
        "print(doc.ents[0]._.cui, 'transformers' in sys.modules, 'tqdm.auto' in sys.modules, 'faiss._swigfaiss' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # spaCy imports every entry point of the package when it makes a pipeline; FAISS is imported
    # only when an index loads. A document's few texts show no progress bar, so tqdm.auto (and
    # asyncio) is not imported.
    assert out == ["False", "D009369", "False", "False", "True"]


def test_saved_int8_pipeline_loads_as_int8(onnx_dirs, tiny_model, tiny_index_dir, tmp_path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model), "precision": "int8"},
                                           "index": {"index": str(tiny_index_dir)}})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    saved = tmp_path / "pipeline" / "sapbert_linker"
    assert json.loads((saved / "cfg.json").read_text())["precision"] == "int8"
    assert is_onnx_dir(saved / "model") and not (saved / "model" / "model.safetensors").exists()
    loaded = spacy.load(tmp_path / "pipeline").get_pipe("sapbert_linker")
    assert isinstance(loaded.encoder, OnnxEncoder)


def test_the_bundled_int8_default_loads_as_shipped_and_names_its_teacher():
    from spacy_sapbert.assets import ASSETS, DEFAULT_INT8
    from spacy_sapbert.encoders.models import resolve_model
    from spacy_sapbert.kb.bundled import bundled_index_meta

    assert resolve_model("default", "int8") == str(ASSETS / DEFAULT_INT8)
    default = load_encoder(resolve_model("default", "int8"), "int8")
    # Trained against the base's frozen keys: the bundled index, embedded by the base, serves it.
    assert isinstance(default, OnnxEncoder) and default.meta["exact_model"] == "base"
    assert default.meta["source_model"] == "default"  # no path of the machine that exported it
    assert default.fingerprint == bundled_index_meta()["model_fingerprint"]
    vectors = default.encode(["lactic acidosis", "lactate acidosis", "cisplatin"])
    assert vectors.shape == (3, 384) and vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def _activation_ranges(graph, values: dict) -> dict:
    """Each static QuantizeLinear's float range, (low, high), by node name; `values`: the graph's
    initializers by name."""
    ranges = {}
    for node in graph.node:
        if node.op_type == "QuantizeLinear":
            scale, zero = float(values[node.input[1]]), int(values[node.input[2]])
            ranges[node.name] = (-zero * scale, (255 - zero) * scale)
    return ranges


@pytest.mark.slow
def test_the_bundled_int8_default_is_the_export_of_the_bundled_model(tmp_path):
    """The graph, every weight and the tokenizer are the export's bit for bit. The activation
    ranges are calibrated by running the dynamically quantised graph, whose fp32 kernels round by
    CPU and whose uint8 steps carry that on, so another machine's export moves them by up to 4 %
    of a range (the code, weights, libraries and names the same): held to 5 %, and the vectors
    to a cosine of 0.97."""
    import onnx
    from onnx import numpy_helper

    from spacy_sapbert.assets import ASSETS, DEFAULT_INT8
    from spacy_sapbert.encoders.export import calibration_texts
    from spacy_sapbert.encoders.models import default_model_path

    again, bundled = export_onnx(default_model_path(), tmp_path / "again", source_name="default"), ASSETS / DEFAULT_INT8
    assert (again / "tokenizer.json").read_bytes() == (bundled / "tokenizer.json").read_bytes()
    graphs = [onnx.load(str(d / "model.onnx")).graph for d in (again, bundled)]
    assert [(n.op_type, list(n.input), list(n.output)) for n in graphs[0].node] == \
        [(n.op_type, list(n.input), list(n.output)) for n in graphs[1].node]
    values = [{i.name: numpy_helper.to_array(i) for i in g.initializer} for g in graphs]
    ranges = [_activation_ranges(g, v) for g, v in zip(graphs, values)]
    assert ranges[0].keys() == ranges[1].keys() and len(ranges[0]) == 24
    for name, (low, high) in ranges[1].items():
        assert max(abs(low - ranges[0][name][0]), abs(high - ranges[0][name][1])) <= 0.05 * (high - low), name
    calibrated = {n for graph in graphs for node in graph.node if node.op_type == "QuantizeLinear" for n in node.input[1:]}
    weights = [{name: value for name, value in v.items() if name not in calibrated} for v in values]
    assert weights[0].keys() == weights[1].keys()
    for name, value in weights[1].items():
        np.testing.assert_array_equal(weights[0][name], value, err_msg=name)
    texts = calibration_texts()[1::50]
    cosine = (OnnxEncoder(again).encode(texts) * OnnxEncoder(bundled).encode(texts)).sum(1)
    assert cosine.min() > 0.97


BATCH_TEXTS = [n for c in TINY_CONCEPTS for n in [c["canonical_name"], *c["aliases"]]] + TEXTS + [
    f"{a} {b}" for a in ("acute", "chronic", "type 2", "lactic") for b in ("acidosis", "diabetes", "renal failure")]


def test_an_int8_vector_does_not_depend_on_the_rest_of_its_batch_bit_for_bit(onnx_dirs):
    onnx = OnnxEncoder(onnx_dirs["int8"], batch_size=1)
    alone = onnx.encode(BATCH_TEXTS)
    order = np.random.default_rng(0).permutation(len(BATCH_TEXTS))
    for batch_size in (7, 32, 256):
        onnx.batch_size = batch_size
        np.testing.assert_array_equal(onnx.encode(BATCH_TEXTS), alone)
        np.testing.assert_array_equal(onnx.encode([BATCH_TEXTS[i] for i in order]), alone[order])
        np.testing.assert_array_equal(onnx.encode(BATCH_TEXTS[::3]), alone[::3])
    assert onnx.meta["activation_scales"] == "static" and onnx.meta["format_version"] == 3


def _rows_run(onnx, texts) -> list:
    """The number of rows of each ONNX Runtime call that encoding `texts` makes."""
    session, rows = onnx.session(), []
    run = session.run
    session.run = lambda names, feeds: rows.append(len(feeds["input_ids"])) or run(names, feeds)
    try:
        onnx.encode(texts)
    finally:
        del session.run
    return rows


def test_a_lone_text_runs_alone_and_gets_the_vector_a_batch_gives_it(onnx_dirs, tmp_path):
    """Format 3 pools by a product that rounds one row as it rounds many, so a document's lone
    texts cost one row, not two; a format-2 export still runs a lone text beside a copy."""
    import shutil

    onnx = OnnxEncoder(onnx_dirs["int8"], threads=1)
    assert _rows_run(onnx, ["lactic acidosis"]) == [1]
    in_batch = onnx.encode(BATCH_TEXTS)
    for i, text in enumerate(BATCH_TEXTS):
        np.testing.assert_array_equal(onnx.encode([text])[0], in_batch[i])
    older = shutil.copytree(onnx_dirs["int8"], tmp_path / "format2")
    settings = json.loads((older / ONNX_META).read_text())
    settings["onnx"]["format_version"] = 2
    (older / ONNX_META).write_text(json.dumps(settings))
    assert _rows_run(OnnxEncoder(older, threads=1), ["lactic acidosis"]) == [2]
    settings["onnx"]["format_version"] = 1
    (older / ONNX_META).write_text(json.dumps(settings))
    with pytest.raises(EncoderError, match="reads versions 2 and 3; export the model again"):
        OnnxEncoder(older)


def test_a_graph_already_pooling_by_product_is_not_rewritten_again(onnx_dirs, tmp_path):
    import shutil

    from spacy_sapbert.encoders.export import pool_by_product

    copy = shutil.copytree(onnx_dirs["fp32"], tmp_path / "again")
    before = (copy / "model.onnx").read_bytes()
    with pytest.raises(EncoderError, match="has 0 pooling sums where the export writes one; export the model again"):
        pool_by_product(copy / "model.onnx")
    assert (copy / "model.onnx").read_bytes() == before


def test_links_are_the_same_whatever_the_batching(onnx_dirs, tiny_index_dir):
    from conftest import ruler_nlp

    texts = [f"The patient had {t} and then {u}." for t, u in zip(BATCH_TEXTS, reversed(BATCH_TEXTS))]
    patterns = [("Disease", t) for t in BATCH_TEXTS if t.strip() and len(t) < 60]

    def links(encoder_batch_size, batch_size, order):
        nlp = ruler_nlp(patterns)
        nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(onnx_dirs["int8"]), "batch_size": encoder_batch_size},
                                               "index": {"index": str(tiny_index_dir)}, "cache_size": 0,
                                               "label_types": {}, "threshold": 0.0})
        docs = list(nlp.pipe([texts[i] for i in order], batch_size=batch_size))
        return {texts[i]: [(e.text, e._.kb_ents[0][0], e._.kb_ents[0][1]) for e in doc.ents] for i, doc in zip(order, docs)}

    forward = list(range(len(texts)))
    reference = links(1, 1, forward)
    assert sum(len(v) for v in reference.values()) > 20
    for encoder_batch_size, batch_size, order in [(7, 256, forward), (32, 16, forward), (256, 256, forward[::-1]),
                                                  (32, 16, list(np.random.default_rng(1).permutation(len(texts))))]:
        other = links(encoder_batch_size, batch_size, order)
        for text, ents in reference.items():
            # Bit for bit, scores included: corpus shards must match a single-process run.
            assert other[text] == ents


def test_the_calibration_names_are_those_of_the_index_searched(tiny_index_dir, tiny_kb, tiny_model):
    from spacy_sapbert.encoders.export import CALIBRATION_STEP, calibration_texts

    names, _ = tiny_kb.name_rows()
    assert calibration_texts(tiny_index_dir) == names[::CALIBRATION_STEP]
    assert exported_model(tiny_model, "int8", calibration=tiny_index_dir) != exported_model(tiny_model, "int8")


def test_quantising_drops_only_onnx_runtimes_preprocessing_note_and_changes_no_level(monkeypatch, caplog, tmp_path):
    import logging

    import onnxruntime.quantization as quantization

    from spacy_sapbert.encoders import export

    seen = {}

    def fake_quantize(*args, **kwargs):
        seen["level"] = logging.getLogger().level
        logging.warning("Please consider to run pre-processing before quantization. Refer to example: …")
        logging.warning("another warning, from anywhere")

    monkeypatch.setattr(quantization, "quantize_dynamic", fake_quantize)
    before = logging.getLogger().level
    with caplog.at_level(logging.WARNING):
        export._quantise_weights(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    messages = [record.getMessage() for record in caplog.records]
    assert seen["level"] == before == logging.getLogger().level
    assert messages == ["another warning, from anywhere"]
    assert not logging.getLogger().filters
