"""A smaller student of a mention encoder: its texts file, its batches, and a run whose student
gives its teacher's vectors and answers to what the teacher answers to."""
import json

import numpy as np
import pytest

from spacy_sapbert.encoders.settings import read_settings, write_settings
from spacy_sapbert_training.data.texts import TextsFormatError, read_texts, write_texts
from spacy_sapbert_training.trainer.batches import TextBatches
from spacy_sapbert_training.trainer.config import TrainConfig, TrainingConfigError
from spacy_sapbert_training.trainer.loop import Trainer

NAMES = ["diabetes mellitus", "type 2 diabetes", "asthma", "bronchial asthma", "heart attack", "myocardial infarction",
         "aspirin", "acetylsalicylic acid", "cisplatin", "kidney failure", "renal failure", "hypertension"]
MENTIONS = ["niddm", "mi", "high blood pressure", "asa"]


def distill_config(model, max_steps=30):
    config = TrainConfig()
    config.model.name_or_path = str(model)
    config.model.layers = [1]
    config.model.freeze = ["embeddings.word_embeddings"]
    config.objective.loss = "distill"
    config.objective.distill.supplement = 0.0
    config.training.batch_size = 8
    config.training.max_steps = max_steps
    config.training.lr = 1e-3
    config.training.warmup_steps = 0
    config.training.save_every = 10
    config.training.log_every = 1
    config.training.device = "cpu"
    return config


@pytest.fixture
def teacher(tiny_model, tmp_path):
    """The tiny model as a trained mention encoder records itself: ranking settings and the keys'
    model it answers to."""
    import shutil

    from spacy_sapbert.encoders.transformer import TorchEncoder

    path = tmp_path / "teacher"
    shutil.copytree(tiny_model, path)
    fingerprint = TorchEncoder(tiny_model).fingerprint
    write_settings(path, pooling="mean", teacher={"teacher": str(tiny_model), "fingerprint": fingerprint},
                   marginal={"tau": 0.05}, sparse={"sparse_weight": 0.25, "analyzer": "char_wb", "ngram_range": [3, 3]})
    return path


@pytest.fixture
def texts_file(tmp_path):
    return write_texts({"names": NAMES, "mentions": MENTIONS}, tmp_path / "texts.tsv.gz")


def test_a_texts_file_reads_back_and_a_bad_line_is_named(texts_file, tmp_path):
    assert read_texts(texts_file) == {"names": NAMES, "supplement": [], "mentions": MENTIONS}
    bad = tmp_path / "bad.tsv"
    bad.write_text("names\tasthma\nasthma without a source\n")
    with pytest.raises(TextsFormatError, match=r"bad.tsv:2: expected a source"):
        read_texts(bad)


def test_text_batches_are_a_function_of_seed_and_index_and_keep_the_shares(teacher, texts_file):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    encoder = TorchEncoder(teacher)
    texts = read_texts(texts_file)
    shares = {"names": 0.75, "supplement": 0.25, "mentions": 0.25}
    one = TextBatches(texts, shares, encoder, batch_size=8, seed=3)
    again = TextBatches(texts, shares, encoder, batch_size=8, seed=3)
    batch, targets = one[5]
    assert batch == again[5][0] and batch != one[6][0]
    # The supplement holds no text, so names and mentions share the batch 3 : 1.
    assert sum(text in NAMES for text in batch) == 6 and sum(text in MENTIONS for text in batch) == 2
    assert np.allclose(targets.numpy(), encoder.encode(batch), atol=1e-6)
    # Two processes take the global batch's texts in turn.
    halves = [TextBatches(texts, shares, encoder, batch_size=4, seed=3, rank=r, world_size=2)[5][0] for r in (0, 1)]
    assert sorted(halves[0] + halves[1]) == sorted(batch)


def test_a_student_learns_its_teachers_vectors_and_answers_to_its_keys_model(teacher, texts_file, tmp_path):
    from transformers import AutoTokenizer

    from spacy_sapbert.encoders.base import recorded_marginal_tau
    from spacy_sapbert.encoders.transformer import TorchEncoder

    start = tmp_path / "start"
    Trainer(distill_config(teacher, max_steps=0), None, start, texts=texts_file)  # the data is checked at once
    run = tmp_path / "run"
    final = Trainer(distill_config(teacher), None, run, texts=texts_file).train()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["loss"] for r in rows[-5:]) < sum(r["loss"] for r in rows[:5])
    assert json.loads((final / "config.json").read_text())["num_hidden_layers"] == 1
    student, master = TorchEncoder(final), TorchEncoder(teacher)
    assert student.fingerprint == master.fingerprint
    # Closer to the teacher than the layer it started from.
    from transformers import AutoModel

    from spacy_sapbert_training.trainer.loop import keep_layers

    untrained = tmp_path / "untrained"
    keep_layers(AutoModel.from_pretrained(teacher), [1]).save_pretrained(untrained)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(untrained)
    write_settings(untrained, pooling="mean")
    wanted = master.encode(NAMES)
    before = (TorchEncoder(untrained).encode(NAMES) * wanted).sum(axis=1).mean()
    after = (student.encode(NAMES) * wanted).sum(axis=1).mean()
    assert after > before + 0.05
    settings = read_settings(final)
    assert settings["sparse"]["sparse_weight"] == 0.25 and recorded_marginal_tau(final) == 0.05
    record = settings["training"]
    assert record["n_texts"] == {"names": len(NAMES), "mentions": len(MENTIONS)}
    assert record["teacher"]["fingerprint"] == master.fingerprint
    # Its card tells a student from the model it copies.
    from spacy_sapbert_training.trainer.package import package_model

    card = (package_model(final, tmp_path / "package") / "MODEL_CARD.md").read_text()
    assert "A 1-layer student (layers 1 of the model it started from)" in card and "Texts, names: 12 distinct" in card


def test_a_student_without_texts_or_with_another_loss_is_refused(teacher, texts_file, tmp_path):
    with pytest.raises(TrainingConfigError, match="give them with --texts"):
        Trainer(distill_config(teacher), None, tmp_path / "run")
    config = distill_config(teacher)
    config.objective.loss = "synonym_marginal"
    config.objective.batch_source = "texts"
    with pytest.raises(TrainingConfigError, match="give key sets with --keys"):
        Trainer(config, None, tmp_path / "run", texts=texts_file)
