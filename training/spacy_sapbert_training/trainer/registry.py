"""The registries a training config chooses its swappable parts from by name, as spaCy and
spacy-transformers choose architectures: losses (`[objective] loss`), miners (`[objective.mining] miner`), batch sources
(`[objective] batch_source`, or the one a loss reads) and model wrappers (`[model] adapter`, and
a `[model] pooling` that changes the model). They are catalogue registries with entry points, so
a package adds a part in its setup.cfg (group "spacy_sapbert_losses", …) without editing this one.

A loss is a function of the `[objective]` section and of what the batches give it (the concept
id of each batch label, or a loss that reads "keys": the key sets' vectors), returning the loss
module; it is trained with the `[objective.mining]` miner:

    @losses.register("centroid")
    def centroid(config: ObjectiveConfig, concept_ids: Sequence[str]) -> torch.nn.Module:
        return CentroidLoss(config.multi_similarity.alpha)  # loss(embeddings, labels), with a miner + its triplets

and chosen with `loss = "centroid"` in a config's [objective] section (or `--objective.loss centroid`).
"""
from typing import Callable, Type, TypeVar

import catalogue

losses = catalogue.create("spacy_sapbert", "losses", entry_points=True)
batch_sources = catalogue.create("spacy_sapbert", "batch_sources", entry_points=True)
model_wrappers = catalogue.create("spacy_sapbert", "model_wrappers", entry_points=True)
# Miners (`[objective.mining] miner`): a function of the [objective] section returning the miner module.
miners = catalogue.create("spacy_sapbert", "miners", entry_points=True)

Factory = TypeVar("Factory", bound=Callable)


def registered(registry: catalogue.Registry, name: str, setting: str, error: Type[Exception] = ValueError) -> Callable:
    """The function registered under `name`.

    registry: one of this module's registries. setting: the config setting that names it, for
        the error. error: what an unknown name raises, with one sentence naming the registered ones.
    """
    if name not in registry:
        known = ", ".join(sorted(registry.get_all()))
        raise error(f"Unknown {setting} {name!r}; use one of {known}, or register one with "
                    f"spacy_sapbert_training.trainer.registry.{registry.namespace[-1]}.register.")
    return registry.get(name)


def reads(batch_source: str) -> Callable[[Factory], Factory]:
    """Mark a registered loss as one that trains on its own batch source, whatever the config's
    `[objective] batch_source` says: a loss over queries and frozen key sets reads "keys" (a loss
    over names and their concept labels, unmarked, reads "pairs" or "prototypes")."""

    def mark(factory: Factory) -> Factory:
        factory.batch_source = batch_source
        return factory

    return mark
