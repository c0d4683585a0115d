"""SapBERT's adapters through peft: LoRA sized as a fraction of the base, trained and saved
alone, loaded onto the base and merged by the runtime (torch and int8 alike)."""
import json

import numpy as np
import pytest
import torch

pytest.importorskip("peft")

from spacy_sapbert_training.trainer.adapters import linear_layers, rank_for  # noqa: E402
from spacy_sapbert_training.trainer.config import TrainConfig, TrainingConfigError  # noqa: E402
from spacy_sapbert_training.trainer.loop import Trainer  # noqa: E402


def adapter_config(tiny_model, fraction, **training):
    settings = dict(batch_size=16, max_steps=6, lr=1e-2, log_every=1, save_every=3, device="cpu", seed=0)
    settings.update(training)
    return TrainConfig.from_dict({
        "model": {"name_or_path": str(tiny_model), "pooling": "mean", "adapter": "lora", "adapter_fraction": fraction},
        "training": settings,
    })


@pytest.mark.parametrize("fraction", [0.13, 0.01])
def test_the_rank_gives_the_asked_share_of_the_base(tiny_model, fraction):
    from spacy_sapbert.encoders.transformer import load_transformer

    _, model = load_transformer(tiny_model)
    _, per_rank = linear_layers(model)
    total = sum(p.numel() for p in model.parameters())
    rank = rank_for(model, fraction)
    # The nearest rank: within half a rank's parameters of the fraction.
    assert abs(rank * per_rank - fraction * total) <= per_rank / 2 or rank == 1


def test_only_the_adapter_trains_and_is_saved_and_the_runtime_merges_it(tiny_model, tiny_pairs, tmp_path):
    from spacy_sapbert.encoders.transformer import ADAPTER_FILE, TorchEncoder
    from spacy_sapbert.encoders.loading import load_encoder

    final = Trainer(adapter_config(tiny_model, 0.13), tiny_pairs, tmp_path / "run").train()
    saved = {p.name for p in final.iterdir()}
    assert ADAPTER_FILE in saved and "adapter_model.safetensors" in saved and "model.safetensors" not in saved
    assert json.loads((final / ADAPTER_FILE).read_text())["base_model_name_or_path"] == str(tiny_model)
    from spacy_sapbert.encoders.settings import read_settings

    record = read_settings(final)["training"]
    assert record["config"]["model"]["adapter"] == "lora"
    base, adapted = TorchEncoder(tiny_model), TorchEncoder(final)
    texts = ["lactic acidosis", "metformin", "renal failure"]
    # Trained: the merged model embeds differently from its base, in the base's shape.
    assert adapted.fingerprint != base.fingerprint
    assert not np.allclose(adapted.encode(texts), base.encode(texts), atol=1e-4)
    # The int8 export is of the merged model: it agrees with the merged torch model.
    int8 = load_encoder(final, "int8")
    assert float(np.min(np.sum(int8.encode(texts) * adapted.encode(texts), axis=1))) > 0.98


def test_an_adapter_run_resumes_to_the_same_adapter(tiny_model, tiny_pairs, tmp_path):
    from safetensors.torch import load_file

    whole = Trainer(adapter_config(tiny_model, 0.01), tiny_pairs, tmp_path / "whole").train()
    first = Trainer(adapter_config(tiny_model, 0.01, max_steps=3), tiny_pairs, tmp_path / "split")
    first.train()
    resumed = Trainer(adapter_config(tiny_model, 0.01), tiny_pairs, tmp_path / "split").train(resume=True)
    expected, got = load_file(whole / "adapter_model.safetensors"), load_file(resumed / "adapter_model.safetensors")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.allclose(expected[name], got[name], atol=1e-6), name


def test_an_unknown_adapter_is_refused_before_the_model_loads(tiny_model, tiny_pairs, tmp_path):
    config = TrainConfig.from_dict({"model": {"name_or_path": str(tiny_model), "adapter": "bottleneck"}})
    with pytest.raises(TrainingConfigError, match=r"Unknown \[model\] adapter 'bottleneck'; use one of .*lora"):
        Trainer(config, tiny_pairs, tmp_path)
