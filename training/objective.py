"""Training objectives: SapBERT's in-batch metric learning, and BioSyn's synonym-marginal
likelihood over frozen keys.

SapBERT's objective (pytorch-metric-learning): every name in a batch is embedded; names of the
same concept are positives, all others negatives. An online miner keeps the hard triplets
(those that violate a margin λ on the distance), and a Multi-Similarity loss is computed over
the pairs those triplets contain. Losses and miners are looked up by name in `LOSSES` and
`MINERS`, so a new one (an MS loss with KGE margins) is one more entry.

The CPU recipe's objective (`loss = "synonym_marginal"`, SynonymMarginalLoss) needs no large
batch: every query meets the whole dictionary as negatives, as frozen key vectors.
"""
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
    tau: the softmax temperature of "synonym_marginal" (cosines divided by it).
    top_k: "synonym_marginal" over each query's top_k keys and its positives only (BioSyn's
        candidates); 0 takes every key.
    own_rows: "exclude" leaves the keys bearing a query's own name out of its softmax;
        "positive" counts those of its concept as positives.
    identity_weight: adds this times the cosine distance between a query and the key of its
        own name (as the keys' model embeds it), which keeps exact names finding themselves.
    refresh_keys_every: re-embed the keys with the model in training every this many steps
        (and at the start): symmetric training, whose model then needs an index of its own.
        0 keeps them frozen.
    sparse_weight: BioSyn's hybrid score, dense cosine + sparse_weight × char 3-gram tf-idf
        cosine (the keys' names fitted), starting from this weight (0: dense only).
    learn_sparse_weight: train the weight jointly, as BioSyn does, at its own rate
        sparse_weight_lr (at the encoder's, one scalar would hardly move).
    """

    loss: str = "multi_similarity"
    alpha: float = 1.0
    beta: float = 60.0
    base: float = 0.5
    miner: str = "triplet_margin"
    miner_margin: float = 0.2
    type_of_triplets: str = "all"
    tau: float = 0.05
    top_k: int = 0
    own_rows: str = "exclude"
    identity_weight: float = 0.0
    refresh_keys_every: int = 0
    sparse_weight: float = 0.0
    learn_sparse_weight: bool = True
    sparse_weight_lr: float = 0.001


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

    metric_name = "triplets"

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


class KeyTargets:
    """What a batch of queries is trained toward: which key set, and for each query the rows
    of its concept (positives) and the rows bearing its own name (own)."""

    def __init__(self, keyset: int, positives: Sequence[torch.Tensor], own: Sequence[torch.Tensor],
                 sparse: Optional[torch.Tensor] = None):
        self.keyset, self.positives, self.own, self.sparse = keyset, list(positives), list(own), sparse

    def to(self, device) -> "KeyTargets":
        return KeyTargets(self.keyset, [p.to(device) for p in self.positives], [o.to(device) for o in self.own],
                          None if self.sparse is None else self.sparse.to(device))

    def masks(self, n_keys: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
        """Boolean (queries, keys) masks of the positive rows and of the own rows."""
        positive = torch.zeros(len(self.positives), n_keys, dtype=torch.bool, device=device)
        own = torch.zeros_like(positive)
        for i, (p, o) in enumerate(zip(self.positives, self.own)):
            positive[i, p] = True
            own[i, o] = True
        return positive, own


class SynonymMarginalLoss(torch.nn.Module):
    """BioSyn's synonym-marginal likelihood of queries against frozen key vectors.

    A query q is scored against every key k of its key set by cosine / τ; the loss is
    −log Σ_{k ∈ positives} softmax(q·K/τ)_k, the probability the query puts on any name of its
    gold concept. Keys bearing the query's own name are left out of the softmax (numerator and
    denominator), so a query learns its concept from the other names, and a training mention
    that is also a key does not teach the model to find itself.

    With sparse scores in the targets (the queries' char n-gram tf-idf cosines to every key),
    the score is BioSyn's hybrid, cosine + w × tf-idf cosine, w a parameter of this loss.

    keysets: one (n_keys, dim) tensor of unit vectors per key set; they never train.
    tau: temperature. top_k: restrict the softmax to each query's top_k keys plus its
        positives (0: every key; the full product is cheap on a CPU up to about a million keys).

    Called with embeddings (queries, dim) and KeyTargets, it returns the mean loss and the
    number of queries whose best-scoring key is a positive (in-batch accuracy).
    """

    metric_name = "hits"

    def __init__(self, keysets: Sequence[torch.Tensor], tau: float = 0.05, top_k: int = 0,
                 own_rows: str = "exclude", identity_weight: float = 0.0, sparse_weight: float = 0.0,
                 learn_sparse_weight: bool = True):
        super().__init__()
        if tau <= 0:
            raise ObjectiveError(f"tau must be positive, not {tau}.")
        if own_rows not in ("exclude", "positive"):
            raise ObjectiveError(f"own_rows must be 'exclude' or 'positive', not {own_rows!r}.")
        self.keysets: List[torch.Tensor] = [k.float() for k in keysets]
        self.tau, self.top_k, self.own_rows, self.identity_weight = tau, top_k, own_rows, identity_weight
        self.sparse_weight = torch.nn.Parameter(torch.tensor(float(sparse_weight)), requires_grad=learn_sparse_weight)

    def to(self, device):  # keys are plain tensors, not buffers: a state dict must not carry them
        self.keysets = [k.to(device) for k in self.keysets]
        return super().to(device)

    def forward(self, embeddings: torch.Tensor, targets: KeyTargets) -> Tuple[torch.Tensor, int]:
        keys = self.keysets[targets.keyset]
        queries = torch.nn.functional.normalize(embeddings.float(), dim=-1)
        cosines = queries @ keys.T
        logits = cosines if targets.sparse is None else cosines + self.sparse_weight * targets.sparse
        logits = logits / self.tau
        positive, own = targets.masks(len(keys), logits.device)
        identity = None
        if self.identity_weight:
            has_own = own.any(dim=1)
            identity = 1 - cosines.masked_fill(~own, -1.0).max(dim=1).values
            identity = identity[has_own].mean() if has_own.any() else identity.sum() * 0
        if self.own_rows == "exclude":
            positive = positive & ~own
            logits = logits.masked_fill(own, float("-inf"))
        if self.top_k and self.top_k < len(keys):
            candidate = torch.zeros_like(positive)
            candidate.scatter_(1, logits.topk(self.top_k, dim=1).indices, True)
            logits = logits.masked_fill(~(candidate | positive), float("-inf"))
        loss = torch.logsumexp(logits, dim=1) - torch.logsumexp(logits.masked_fill(~positive, float("-inf")), dim=1)
        hits = positive.gather(1, logits.argmax(dim=1, keepdim=True)).sum()
        loss = loss.mean()
        if identity is not None:
            loss = loss + self.identity_weight * identity
        return loss, int(hits)
