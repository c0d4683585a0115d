"""Adapters (SapBERT's parameter-efficient variant) through peft: a LoRA adapter on every linear
layer of the encoder, sized as a fraction of the base's parameters, trained alone and saved
alone. The runtime loads base + adapter and merges them (spacy_sapbert.encoders.transformer.load_transformer),
so the int8 ONNX export and the linker see one plain model."""
import logging
from typing import Tuple

import torch

logger = logging.getLogger(__name__)


def linear_layers(model: torch.nn.Module) -> Tuple[list, int]:
    """(the leaf names of the encoder's linear layers, the parameters one LoRA rank adds over
    all of them: in + out features per layer)."""
    names, per_rank = set(), 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.startswith("pooler"):
            names.add(name.rsplit(".", 1)[-1])
            per_rank += module.in_features + module.out_features
    return sorted(names), per_rank


def rank_for(model: torch.nn.Module, fraction: float) -> int:
    """The LoRA rank whose adapter size is nearest `fraction` of the model's parameters."""
    _, per_rank = linear_layers(model)
    total = sum(p.numel() for p in model.parameters())
    return max(1, round(fraction * total / per_rank))


def add_lora(model: torch.nn.Module, fraction: float, base: str) -> torch.nn.Module:
    """`model` with a fresh LoRA adapter of about `fraction` of its size (only the adapter
    trains); `base` is recorded as the model the adapter is loaded onto."""
    from peft import LoraConfig, get_peft_model

    from spacy_sapbert.encoders.models import resolve_model

    if str(resolve_model("base")) == str(base):  # the wheel's path differs per machine: keep the name
        base = "base"
    targets, _ = linear_layers(model)
    rank = rank_for(model, fraction)
    total = sum(p.numel() for p in model.parameters())
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, lora_dropout=0.0, bias="none",
                        base_model_name_or_path=base)
    wrapped = get_peft_model(model, config)
    added = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    logger.info("LoRA adapter, rank %d on %s: %d trainable parameters, %.1f%% of the base's %d.",
                rank, ", ".join(targets), added, 100 * added / total, total)
    return wrapped


def load_trainable(source, base_model: torch.nn.Module) -> torch.nn.Module:
    """A saved adapter on `base_model`, still apart and trainable (resuming its training)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, str(source), is_trainable=True)
