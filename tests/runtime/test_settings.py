"""A model directory's settings: one sapbert.json, read and written in one place."""
import json
import shutil

import pytest

from spacy_sapbert.encoders.base import (
    detect_pooling,
    model_record,
    recorded_context,
    recorded_marginal_tau,
    recorded_sparse_weight,
)
from spacy_sapbert.encoders.settings import (
    SETTINGS_FILE,
    SettingsError,
    read_settings,
    write_settings,
)

SECTIONS = {
    "teacher": {"teacher": "base", "fingerprint": "400f505a9a8357df"},
    "context": {"window": 32, "max_length": 64},
    "sparse": {"sparse_weight": 0.291032, "analyzer": "char_wb", "ngram_range": [3, 3]},
    "marginal": {"tau": 0.05},
    "base": {"base": "base", "from_base": ["embeddings.word_embeddings.weight"], "sha256": "ab" * 32},
    "training": {"steps": 2, "wall_seconds": 0.1, "config": {"objective": {"marginal": {"tau": 0.05}}}, "started_from": {"steps": 1}},
    "onnx": {"format_version": 2, "pooling": "mean", "max_length": 25, "files": {}},
}


# The files a directory of the unpublished 0.1 held its records in, which nothing reads now.
OLD_FILES = ("sapbert_pooling.json", "sapbert_teacher.json", "sapbert_sparse.json", "sapbert_marginal.json",
             "sapbert_base.json", "sapbert_onnx.json", "training.json")


def _old_files(path):
    return sorted(name for name in OLD_FILES if (path / name).exists())


def test_one_file_holds_every_section(tmp_path):
    model = tmp_path / "model"
    write_settings(model, pooling="mean", **SECTIONS)
    assert read_settings(model) == {"pooling": "mean", **SECTIONS}
    assert detect_pooling(model) == "mean" and recorded_context(model) == SECTIONS["context"]
    assert recorded_sparse_weight(model) == 0.291032 and recorded_marginal_tau(model) == 0.05
    assert model_record(model, "teacher") == SECTIONS["teacher"]
    assert read_settings(tmp_path / "nowhere") == {} and read_settings("some-org/some-model") == {}
    assert detect_pooling(tmp_path / "nowhere") == "cls" and recorded_sparse_weight(tmp_path) == 0.0


def test_the_bundled_model_and_its_export_record_one_sapbert_json_each():
    pytest.importorskip("spacy_sapbert_model")  # the fp32 weights, which the gpu extra brings
    from spacy_sapbert.assets import ASSETS

    from spacy_sapbert.encoders.models import default_model_path

    model, int8 = read_settings(default_model_path()), read_settings(ASSETS / "model-int8")
    assert model["pooling"] == "mean" and model["teacher"]["teacher"] == "base" and "training" in model
    assert _old_files(default_model_path()) == []
    # the int8 export, written since sapbert.json, carries the model's scoring with it
    assert int8["onnx"]["exact_model"] == "base" and int8["marginal"] == {"tau": 0.05}
    assert int8["sparse"] == model["sparse"]


def test_write_settings_merges_sections_into_one_file(tmp_path):
    write_settings(tmp_path, pooling="mean", sparse=SECTIONS["sparse"])
    path = write_settings(tmp_path, marginal={"tau": 0.1}, pooling="cls")
    assert path == tmp_path / SETTINGS_FILE and _old_files(tmp_path) == []
    expected = {"marginal": {"tau": 0.1}, "pooling": "cls", "sparse": SECTIONS["sparse"]}
    assert path.read_text() == json.dumps(expected, indent=2, sort_keys=True) + "\n"
    assert read_settings(tmp_path) == expected
    with pytest.raises(ValueError, match="Unknown settings section 'poling'"):
        write_settings(tmp_path, poling="cls")


def test_values_stay_bit_identical_through_sapbert_json(tmp_path):
    sections = {"sparse": {"sparse_weight": 0.1 + 0.2, "analyzer": "char_wb", "ngram_range": [3, 3]},
                "marginal": {"tau": 1 / 3}}
    write_settings(tmp_path / "new", **sections)
    assert read_settings(tmp_path / "new") == sections
    assert read_settings(tmp_path / "new")["sparse"]["sparse_weight"] == 0.1 + 0.2


def test_an_unreadable_settings_file_says_which(tmp_path):
    (tmp_path / SETTINGS_FILE).write_text("{not json")
    with pytest.raises(SettingsError, match=r"sapbert.json is not valid JSON"):
        read_settings(tmp_path)


def test_an_onnx_export_records_one_sapbert_json(tiny_model, tmp_path):
    from spacy_sapbert.encoders.onnx import OnnxEncoder, is_onnx_dir
    from spacy_sapbert.encoders.export import export_onnx

    model = shutil.copytree(tiny_model, tmp_path / "model")
    write_settings(model, marginal={"tau": 0.05}, sparse={"sparse_weight": 0.4})  # a trained model's records
    export = export_onnx(model, tmp_path / "export", precision="fp32")
    assert (export / SETTINGS_FILE).exists() and _old_files(export) == []
    settings = read_settings(export)
    assert settings["marginal"] == {"tau": 0.05} and settings["sparse"] == {"sparse_weight": 0.4}
    assert settings["onnx"]["pooling"] == "mean" and set(settings["onnx"]["files"]) == {"model.onnx", "tokenizer.json"}
    assert is_onnx_dir(export) and not is_onnx_dir(model)
    assert OnnxEncoder(export).encode(["lactic acidosis"]).shape == (1, 32)


def test_a_trained_model_and_its_package_record_one_sapbert_json(tiny_model, tiny_pairs, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert_training.trainer.checkpoint import latest_checkpoint
    from spacy_sapbert_training.trainer.config import TrainConfig
    from spacy_sapbert_training.trainer.package import package_model
    from spacy_sapbert_training.trainer.loop import Trainer

    start = shutil.copytree(tiny_model, tmp_path / "start")
    write_settings(start, training={"steps": 7, "torch": "x"})
    config = TrainConfig.from_dict({
        "model": {"name_or_path": str(start), "pooling": "mean"},
        "training": dict(batch_size=8, max_steps=2, lr=1e-3, save_every=1, device="cpu", seed=0),
    })
    final = Trainer(config, tiny_pairs, tmp_path / "run").train()
    checkpoint = latest_checkpoint(tmp_path / "run") / "model"
    for model in (final, checkpoint):
        assert (model / SETTINGS_FILE).exists() and _old_files(model) == []
    settings = read_settings(final)
    assert settings["pooling"] == "mean" and settings["training"]["steps"] == 2
    assert settings["training"]["started_from"] == {"steps": 7, "torch": "x"}
    packaged = package_model(final, tmp_path / "package")
    assert _old_files(packaged) == [] and read_settings(packaged) == settings
    assert "Steps: 7" in (packaged / "MODEL_CARD.md").read_text()
    assert TorchEncoder(packaged).pooling == "mean"
