"""Model wrappers: what a `[model]` setting changes in the model a run trains, registered in
registry.model_wrappers. `[model] adapter` names one ("lora": a peft LoRA adapter, trained and
saved alone); a `[model] pooling` that changes the model registers one under its own name
("mention": [Ms] and [Me] become tokens of their own, with embedding rows, and a text pools the
tokens between them). Poolings that change nothing ("cls", "mean") have none.
"""
from typing import Callable, List, Optional, Tuple

import torch

from spacy_sapbert.encoders.base import MENTION_END, MENTION_START
from spacy_sapbert.kb.concepts import PathLike

from . import registry
from .config import ModelConfig, TrainingConfigError

Loaded = Tuple[object, torch.nn.Module]  # a tokenizer and its model


class ModelWrapper:
    """What the trainer asks of a model wrapper; this one changes nothing."""

    markers: Optional[Tuple[int, int]] = None  # once wrapped, the ids "mention" pooling reads between

    def load_checkpoint(self, source: PathLike, load: Callable[[PathLike], Loaded]) -> Optional[Loaded]:
        """The tokenizer and model of a checkpoint's model as this wrapper saved it, or None where
        `load`, the plain loader, reads it."""
        return None

    def wrap(self, model: torch.nn.Module, tokenizer, fresh: bool) -> torch.nn.Module:
        """`model` (and `tokenizer`) as the run trains them; `fresh` at step 0, False for a
        checkpoint's model."""
        return model


class LoraAdapter(ModelWrapper):
    """A peft LoRA adapter of about `fraction` of the base's parameters on every linear layer;
    `base` is recorded as the model the saved adapter is loaded onto (adapters.add_lora)."""

    def __init__(self, fraction: float, base: str):
        self.fraction, self.base = fraction, base

    def load_checkpoint(self, source: PathLike, load: Callable[[PathLike], Loaded]) -> Optional[Loaded]:
        """The checkpoint's adapter, still apart and trainable, on the base it names."""
        from transformers import AutoTokenizer

        from spacy_sapbert.encoders.transformer import adapter_base

        from .adapters import load_trainable

        _, base = load(adapter_base(source))
        return AutoTokenizer.from_pretrained(str(source)), load_trainable(source, base)

    def wrap(self, model: torch.nn.Module, tokenizer, fresh: bool) -> torch.nn.Module:
        if not fresh:  # a checkpoint's model has its adapter already
            return model
        from .adapters import add_lora

        return add_lora(model, self.fraction, self.base)


class MentionMarkers(ModelWrapper):
    """The mention markers as special tokens of the tokenizer, and rows of the model's embeddings."""

    def wrap(self, model: torch.nn.Module, tokenizer, fresh: bool) -> torch.nn.Module:
        self.markers = add_markers(tokenizer, model)
        return model


@registry.model_wrappers.register("lora")
def lora(config: ModelConfig) -> ModelWrapper:
    """`[model] adapter = "lora"`, of `[model] adapter_fraction` of the base's size."""
    return LoraAdapter(config.adapter_fraction, config.name_or_path)


@registry.model_wrappers.register("mention")
def mention(config: ModelConfig) -> ModelWrapper:
    """`[model] pooling = "mention"`: contextual mentions between markers."""
    return MentionMarkers()


def add_markers(tokenizer, model: torch.nn.Module) -> Tuple[int, int]:
    """Give the tokenizer the mention markers as special tokens (never split, never lower-cased)
    and the model their embedding rows, unless a model trained on contexts has them; their ids."""
    from spacy_sapbert.encoders.transformer import marker_ids

    if tokenizer.add_tokens([MENTION_START, MENTION_END], special_tokens=True):
        model.resize_token_embeddings(len(tokenizer))
    return marker_ids(tokenizer)


def wrappers_for(config: ModelConfig, pooling: str) -> List[ModelWrapper]:
    """The wrappers of a `[model]` section, in the order they wrap: its adapter's (an unknown
    adapter is refused), then its pooling's (`pooling`, resolved from "auto"), where it has one."""
    wrappers = []
    if config.adapter:
        make = registry.registered(registry.model_wrappers, config.adapter, "[model] adapter", TrainingConfigError)
        wrappers.append(make(config))
    if pooling in registry.model_wrappers:
        wrappers.append(registry.model_wrappers.get(pooling)(config))
    return wrappers


def load_wrapped(wrappers: List[ModelWrapper], source: PathLike, load: Callable[[PathLike], Loaded]) -> Loaded:
    """The tokenizer and model of a checkpoint's model: as the first wrapper that saved it its own
    way reads it (an adapter), else with `load`."""
    for wrapper in wrappers:
        loaded = wrapper.load_checkpoint(source, load)
        if loaded is not None:
            return loaded
    return load(source)
