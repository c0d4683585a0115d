import numpy as np
import pytest

from spacy_sapbert.encoders.transformer import TorchEncoder
from spacy_sapbert.encoders.base import EncoderError, detect_pooling


def test_vectors_are_unit_and_keep_input_order(tiny_encoder):
    texts = ["lactic acidosis", "metformin", "non-insulin-dependent diabetes mellitus", "x"]
    together = tiny_encoder.encode(texts)
    assert together.shape == (4, tiny_encoder.dim) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    # Batches are sorted by length internally; each row must still belong to its text.
    one_by_one = np.vstack([tiny_encoder.encode([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


def test_pooling_changes_vectors_and_fingerprint(tiny_model):
    cls, mean = TorchEncoder(tiny_model, pooling="cls"), TorchEncoder(tiny_model, pooling="mean")
    assert not np.allclose(cls.encode(["metformin"]), mean.encode(["metformin"]))
    assert cls.fingerprint != mean.fingerprint
    assert cls.fingerprint == TorchEncoder(tiny_model, pooling="cls").fingerprint
    assert TorchEncoder(tiny_model, pooling="cls", max_length=8).fingerprint != cls.fingerprint


def test_auto_pooling_reads_the_model_directory(tiny_model, tmp_path):
    assert detect_pooling(tiny_model) == "mean"
    saved = TorchEncoder(tiny_model, pooling="cls").save(tmp_path / "copy")
    assert TorchEncoder(saved).pooling == "cls"
    assert detect_pooling(tmp_path) == "cls"


def test_an_fp16_model_computes_in_fp32_on_a_cpu(tiny_model, tiny_encoder, tmp_path):
    import shutil

    import torch
    from transformers import AutoModel

    half = tmp_path / "fp16"
    shutil.copytree(tiny_model, half)
    AutoModel.from_pretrained(str(tiny_model), dtype=torch.float16).save_pretrained(half)
    encoder = TorchEncoder(half)
    assert encoder.model.dtype == torch.float32
    texts = ["lactic acidosis", "metformin"]
    np.testing.assert_allclose(encoder.encode(texts), tiny_encoder.encode(texts), atol=2e-3)


def test_long_empty_and_unicode_texts(tiny_encoder):
    vectors = tiny_encoder.encode(["tumour " * 150, "", "Ménière’s disease — αβ", "\u200b"])
    assert np.isfinite(vectors).all()
    assert tiny_encoder.encode([]).shape == (0, tiny_encoder.dim)


def test_errors(tiny_model, tmp_path):
    with pytest.raises(EncoderError, match=r"Unknown pooling 'max'; use one of cls, mean"):
        TorchEncoder(tiny_model, pooling="max")
    with pytest.raises(EncoderError, match=r"has no config.json \(nor adapter_config.json\), so it is not a Hugging Face model directory"):
        TorchEncoder(tmp_path)
    with pytest.raises(EncoderError, match=r"Unknown device 'tpu'"):
        TorchEncoder(tiny_model, device="tpu")
    with pytest.raises(EncoderError, match=r"max_length must be at least 2"):
        TorchEncoder(tiny_model, max_length=1)


def test_fp32_without_torch_names_the_extra(monkeypatch, tiny_model):
    """A runtime installed without the gpu extra: fp32 fails with one sentence naming it."""
    import sys

    from spacy_sapbert.encoders.base import EncoderError
    from spacy_sapbert.encoders.loading import load_encoder

    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    import spacy_sapbert.encoders

    monkeypatch.delitem(sys.modules, "spacy_sapbert.encoders.transformer", raising=False)
    monkeypatch.delattr(spacy_sapbert.encoders, "transformer", raising=False)
    with pytest.raises(EncoderError, match=r"^precision 'fp32' needs torch and transformers.*spacy-sapbert\[gpu\]"):
        load_encoder(tiny_model, "fp32")


def test_fp32_without_torch_fails_at_initialize(monkeypatch, tiny_model, tiny_index_dir):
    import sys

    import spacy

    from spacy_sapbert.encoders.base import EncoderError

    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(tiny_model), "precision": "fp32"}, "index": {"index": str(tiny_index_dir)}})
    with pytest.raises(EncoderError, match=r"^encoder.precision 'fp32' needs torch and transformers"):
        nlp.initialize()


@pytest.mark.parametrize("model,precision,said", [
    ("./no/such/model", "fp32", r"^encoder.model './no/such/model' is not a folder here \(.*\); fix the path"),
    ("models/x", "int8", r"^encoder.model 'models/x' is not a folder here \(.*\); fix the path"),
    ("models/x", "fp32", r"^encoder.model 'models/x' is not a folder here, nor in the Hugging Face cache, and the hub, .* cannot be reached"),
])
def test_a_model_that_is_nowhere_gets_one_sentence_at_once(monkeypatch, model, precision, said):
    from huggingface_hub import constants

    from spacy_sapbert.encoders.base import EncoderError
    from spacy_sapbert.encoders.loading import load_encoder

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1: the hub is not asked
    with pytest.raises(EncoderError, match=said):
        load_encoder(model, precision)


def test_a_hub_name_in_the_hugging_face_cache_needs_no_network(monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    from spacy_sapbert.encoders.loading import check_model_source

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo, name, **kwargs: f"/cache/{repo}/{name}" if repo == "owner/cached" else None)
    check_model_source("owner/cached", hub=True)  # no error: it loads from the cache
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: pytest.fail("the hub was asked offline"))
    with pytest.raises(ValueError, match="nor in the Hugging Face cache"):
        check_model_source("owner/absent", hub=True)
