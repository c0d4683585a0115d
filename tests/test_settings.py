"""A model directory's settings: one sapbert.json, read in one place; directories written before
it (one file per record) read as the same sections and keep loading."""
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
    LEGACY_FILES,
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
    "training": {"steps": 2, "wall_seconds": 0.1, "config": {"objective": {"tau": 0.05}}, "started_from": {"steps": 1}},
    "onnx": {"format_version": 2, "pooling": "mean", "max_length": 25, "files": {}},
}


def _legacy_dir(path, sections=SECTIONS, pooling="mean"):
    """A directory as written before sapbert.json: one file per record, as the old code wrote them."""
    path.mkdir(parents=True, exist_ok=True)
    (path / LEGACY_FILES["pooling"]).write_text(json.dumps({"pooling": pooling}) + "\n")
    for section, record in sections.items():
        (path / LEGACY_FILES[section]).write_text(json.dumps(record, indent=2) + "\n")
    return path


def _legacy_files(path):
    return sorted(name for name in LEGACY_FILES.values() if (path / name).exists())


def test_a_legacy_directory_reads_as_the_same_sections(tmp_path):
    model = _legacy_dir(tmp_path / "old")
    assert read_settings(model) == {"pooling": "mean", **SECTIONS}
    assert detect_pooling(model) == "mean" and recorded_context(model) == SECTIONS["context"]
    assert recorded_sparse_weight(model) == 0.291032 and recorded_marginal_tau(model) == 0.05
    # model_record takes a section, or the file that held it
    assert model_record(model, "teacher") == model_record(model, LEGACY_FILES["teacher"]) == SECTIONS["teacher"]
    assert read_settings(tmp_path / "nowhere") == {} and read_settings("some-org/some-model") == {}
    assert detect_pooling(tmp_path / "nowhere") == "cls" and recorded_sparse_weight(tmp_path) == 0.0


def test_the_bundled_model_reads_through_its_legacy_files_and_its_export_through_sapbert_json():
    pytest.importorskip("spacy_sapbert_model")  # the fp32 weights, which the gpu extra brings
    from spacy_sapbert.assets import ASSETS

    from spacy_sapbert.encoders.models import default_model_path

    model, int8 = read_settings(default_model_path()), read_settings(ASSETS / "model-int8")
    assert model["pooling"] == "mean" and model["teacher"]["teacher"] == "base" and "training" in model
    assert not (default_model_path() / SETTINGS_FILE).exists()  # read through its legacy files
    # the int8 export, written since sapbert.json, carries the model's scoring with it
    assert int8["onnx"]["exact_model"] == "base" and int8["marginal"] == {"tau": 0.05}
    assert int8["sparse"] == model["sparse"]


def test_sapbert_json_wins_a_section_both_record(tmp_path):
    model = _legacy_dir(tmp_path / "mixed")
    (model / SETTINGS_FILE).write_text(json.dumps({"pooling": "cls", "sparse": {"sparse_weight": 0.5}}))
    settings = read_settings(model)
    assert settings["pooling"] == "cls" and settings["sparse"] == {"sparse_weight": 0.5}
    assert settings["marginal"] == SECTIONS["marginal"]  # the legacy file still gives what sapbert.json lacks
    assert detect_pooling(model) == "cls" and recorded_sparse_weight(model) == 0.5


def test_write_settings_merges_sections_into_one_file(tmp_path):
    write_settings(tmp_path, pooling="mean", sparse=SECTIONS["sparse"])
    path = write_settings(tmp_path, marginal={"tau": 0.1}, pooling="cls")
    assert path == tmp_path / SETTINGS_FILE and _legacy_files(tmp_path) == []
    expected = {"marginal": {"tau": 0.1}, "pooling": "cls", "sparse": SECTIONS["sparse"]}
    assert path.read_text() == json.dumps(expected, indent=2, sort_keys=True) + "\n"
    assert read_settings(tmp_path) == expected
    with pytest.raises(ValueError, match="Unknown settings section 'poling'"):
        write_settings(tmp_path, poling="cls")


def test_values_stay_bit_identical_from_legacy_files_to_sapbert_json(tmp_path):
    sections = {"sparse": {"sparse_weight": 0.1 + 0.2, "analyzer": "char_wb", "ngram_range": [3, 3]},
                "marginal": {"tau": 1 / 3}}
    old = _legacy_dir(tmp_path / "old", sections)
    write_settings(tmp_path / "new", **read_settings(old))
    assert read_settings(tmp_path / "new") == read_settings(old)
    assert read_settings(tmp_path / "new")["sparse"]["sparse_weight"] == 0.1 + 0.2


def test_an_unreadable_settings_file_says_which(tmp_path):
    (tmp_path / SETTINGS_FILE).write_text("{not json")
    with pytest.raises(SettingsError, match=r"sapbert.json is not valid JSON"):
        read_settings(tmp_path)


def test_an_onnx_export_records_one_sapbert_json(tiny_model, tmp_path):
    from spacy_sapbert.encoders.onnx import OnnxEncoder, is_onnx_dir
    from spacy_sapbert.encoders.export import export_onnx

    model = shutil.copytree(tiny_model, tmp_path / "model")
    (model / LEGACY_FILES["marginal"]).write_text(json.dumps({"tau": 0.05}))  # a model of today
    (model / LEGACY_FILES["sparse"]).write_text(json.dumps({"sparse_weight": 0.4}))
    export = export_onnx(model, tmp_path / "export", precision="fp32")
    assert (export / SETTINGS_FILE).exists() and _legacy_files(export) == []
    settings = read_settings(export)
    assert settings["marginal"] == {"tau": 0.05} and settings["sparse"] == {"sparse_weight": 0.4}
    assert settings["onnx"]["pooling"] == "mean" and set(settings["onnx"]["files"]) == {"model.onnx", "tokenizer.json"}
    assert is_onnx_dir(export) and not is_onnx_dir(model)
    assert OnnxEncoder(export).encode(["lactic acidosis"]).shape == (1, 32)


def test_a_cached_export_written_before_sapbert_json_still_loads(tiny_model, tmp_path, monkeypatch):
    from spacy_sapbert.encoders.loading import load_encoder
    from spacy_sapbert.encoders.onnx import ONNX_LEGACY_META, OnnxEncoder
    from spacy_sapbert.encoders.export import exported_model

    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))
    cached = exported_model(tiny_model, "fp32")
    vectors = OnnxEncoder(cached).encode(["lactic acidosis"])
    # What an older spacy-sapbert left in the cache: the export's record in sapbert_onnx.json.
    settings = json.loads((cached / SETTINGS_FILE).read_text())
    (cached / ONNX_LEGACY_META).write_text(json.dumps(settings.pop("onnx"), indent=2) + "\n")
    (cached / SETTINGS_FILE).unlink()
    stamp = (cached / "model.onnx").stat().st_mtime_ns
    assert exported_model(tiny_model, "fp32") == cached and (cached / "model.onnx").stat().st_mtime_ns == stamp
    assert (OnnxEncoder(cached).encode(["lactic acidosis"]) == vectors).all()
    assert isinstance(load_encoder(cached, "fp32"), OnnxEncoder)  # an export loads as itself


def test_a_trained_model_and_its_package_record_one_sapbert_json(tiny_model, tiny_pairs, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert_training.trainer.checkpoint import latest_checkpoint
    from spacy_sapbert_training.trainer.config import TrainConfig
    from spacy_sapbert_training.trainer.package import package_model
    from spacy_sapbert_training.trainer.loop import Trainer

    start = shutil.copytree(tiny_model, tmp_path / "start")
    (start / LEGACY_FILES["training"]).write_text(json.dumps({"steps": 7, "torch": "x"}, indent=2) + "\n")
    config = TrainConfig.from_dict({
        "model": {"name_or_path": str(start), "pooling": "mean"},
        "training": dict(batch_size=8, max_steps=2, lr=1e-3, save_every=1, device="cpu", seed=0),
    })
    final = Trainer(config, tiny_pairs, tmp_path / "run").train()
    checkpoint = latest_checkpoint(tmp_path / "run") / "model"
    for model in (final, checkpoint):
        assert (model / SETTINGS_FILE).exists() and _legacy_files(model) == []
    settings = read_settings(final)
    assert settings["pooling"] == "mean" and settings["training"]["steps"] == 2
    assert settings["training"]["started_from"] == {"steps": 7, "torch": "x"}  # read from the legacy file
    packaged = package_model(final, tmp_path / "package")
    assert _legacy_files(packaged) == [] and read_settings(packaged) == settings
    assert "Steps: 7" in (packaged / "MODEL_CARD.md").read_text()
    assert TorchEncoder(packaged).pooling == "mean"
