"""Losses and miners for self-alignment training, from pytorch-metric-learning.

SapBERT's objective: every name in a batch is embedded; names of the same concept are
positives, all others negatives. An online miner keeps the hard triplets (those that violate a
margin λ on the distance), and a Multi-Similarity loss is computed over the pairs those
triplets contain. Losses and miners are looked up by name in `LOSSES` and `MINERS`, so a new
one (BioSyn's marginal likelihood, an MS loss with KGE margins) is one more entry.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from pytorch_metric_learning import losses, miners


@dataclass
class ObjectiveConfig:
    """The `[objective]` section of a training config.

    loss: a key of LOSSES. alpha, beta, base: the Multi-Similarity constants α (positive
        weight), β (negative weight) and ε (the similarity the exponents are centred on); the
        SapBERT paper used 2 / 50 / 0.5, its official code 1 / 60 / 0.5.
    miner: a key of MINERS, or "none" to feed every pair to the loss.
    miner_margin: λ, the distance margin a triplet must violate to be kept.
    type_of_triplets: "all" (every violating triplet, SapBERT's choice), "hard" or "semihard".
    """

    loss: str = "multi_similarity"
    alpha: float = 1.0
    beta: float = 60.0
    base: float = 0.5
    miner: str = "triplet_margin"
    miner_margin: float = 0.2
    type_of_triplets: str = "all"


def _multi_similarity(config: ObjectiveConfig) -> torch.nn.Module:
    return losses.MultiSimilarityLoss(alpha=config.alpha, beta=config.beta, base=config.base)


def _triplet_margin(config: ObjectiveConfig) -> torch.nn.Module:
    return miners.TripletMarginMiner(margin=config.miner_margin, type_of_triplets=config.type_of_triplets)


LOSSES: Dict[str, Callable[[ObjectiveConfig], torch.nn.Module]] = {
    "multi_similarity": _multi_similarity,
}
MINERS: Dict[str, Callable[[ObjectiveConfig], torch.nn.Module]] = {
    "triplet_margin": _triplet_margin,
}


class ObjectiveError(ValueError):
    """The objective section of a config names something that does not exist."""


class SelfAlignmentObjective(torch.nn.Module):
    """Mine hard pairs in a batch of embeddings and score them with a metric-learning loss.

    config: the loss and miner names and their constants.

    Called with embeddings (n, d) and integer concept labels (n,), it returns the loss and the
    number of mined triplets (0 means the batch taught nothing: every triplet met the margin).
    """

    def __init__(self, config: ObjectiveConfig):
        super().__init__()
        if config.loss not in LOSSES:
            raise ObjectiveError(f"Unknown loss {config.loss!r}; use one of {', '.join(LOSSES)}.")
        if config.miner != "none" and config.miner not in MINERS:
            raise ObjectiveError(
                f"Unknown miner {config.miner!r}; use one of {', '.join(MINERS)} or 'none'."
            )
        self.config = config
        self.loss = LOSSES[config.loss](config)
        self.miner: Optional[torch.nn.Module] = (
            None if config.miner == "none" else MINERS[config.miner](config)
        )

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> Tuple[torch.Tensor, int]:
        # Metric losses are numerically fragile in half precision (β = 60 inside an exp).
        embeddings = embeddings.float()
        if self.miner is None:
            return self.loss(embeddings, labels), -1
        triplets = self.miner(embeddings, labels)
        return self.loss(embeddings, labels, triplets), int(triplets[0].numel())
