"""The distilled student: trains, answers to its teacher's fingerprint, links with its index."""
import json

import pytest

from spacy_sapbert.encoder import TEACHER_FILE, Encoder
from spacy_sapbert.encoder_base import exact_encoder, load_encoder
from spacy_sapbert.index import ConceptIndex


@pytest.fixture(scope="module")
def student(tiny_model, tiny_index_dir, tmp_path_factory):
    from training.distill import distill

    out = tmp_path_factory.mktemp("distill")
    return distill(out, tiny_index_dir, teacher=str(tiny_model), layers=[1], epochs=3, batch_size=8, lr=1e-3)


def test_student_trains_toward_the_teacher(student, tiny_encoder, tiny_index_dir):
    log = [json.loads(line) for line in (student.parent / "metrics.jsonl").read_text().splitlines()]
    record = json.loads((student / TEACHER_FILE).read_text())
    n_names = ConceptIndex.load(tiny_index_dir).meta["n_names"]
    assert record["layers"] == [1] and record["steps"] == log[-1]["step"] == 3 * -(-n_names // 8)
    encoder = Encoder(student)
    assert encoder.model.config.num_hidden_layers == 1
    assert encoder.fingerprint == tiny_encoder.fingerprint  # the teacher's space, the teacher's index
    ConceptIndex.load(tiny_index_dir, encoder=encoder)  # accepted: same fingerprint
    from training.distill import student_from

    names, _ = ConceptIndex.load(tiny_index_dir).kb.name_rows()
    target = tiny_encoder.encode(names)
    untrained = Encoder(student)
    untrained.model = student_from(tiny_encoder, [1]).eval()
    assert (encoder.encode(names) * target).sum(1).mean() > (untrained.encode(names) * target).sum(1).mean()
    assert exact_encoder(encoder).name_or_path == tiny_encoder.name_or_path


def test_student_exports_to_int8_and_builds_indexes_with_its_teacher(student, tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path))
    fast = load_encoder(student, "int8")
    assert fast.fingerprint == tiny_encoder.fingerprint
    assert exact_encoder(fast).name_or_path == tiny_encoder.name_or_path


def test_distill_refuses_a_compressed_index(tiny_model, tiny_index_dir, tmp_path):
    from training.distill import distill

    compact = ConceptIndex.load(tiny_index_dir).converted("sq8").save(tmp_path / "sq8")
    with pytest.raises(ValueError, match="give an exact"):
        distill(tmp_path / "out", compact, teacher=str(tiny_model), layers=[0], max_steps=1)
