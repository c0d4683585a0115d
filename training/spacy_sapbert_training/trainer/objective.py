"""Training objectives: SapBERT's in-batch metric learning, and BioSyn's synonym-marginal
likelihood over frozen keys.

SapBERT's objective (pytorch-metric-learning): every name in a batch is embedded; names of the
same concept are positives, all others negatives. An online miner keeps the hard triplets
(those that violate a margin λ on the distance), and a Multi-Similarity loss is computed over
the pairs those triplets contain. Losses are registered functions (registry.losses) chosen by
the config's `loss`, so a new one (an MS loss with KGE margins) is one more registered function;
miners are registered functions too (registry.miners).

The CPU recipe's objective (`loss = "synonym_marginal"`, SynonymMarginalLoss) needs no large
batch: every query meets the whole dictionary as negatives, as frozen key vectors; it reads the
"keys" batch source (registry.reads).
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from . import registry


@dataclass
class MultiSimilarityConfig:
    """`[objective.multi_similarity]`: the constants of the Multi-Similarity losses.

    alpha, beta, base: α (positive weight), β (negative weight) and ε (the similarity the
        exponents are centred on); the SapBERT paper used 2 / 50 / 0.5, its official code 1 / 60 / 0.5.
    pos_margin, neg_margin: λp and λn of "multi_similarity_v2" (the CL+KGE paper: 1 and 0.5),
        which centre the positive and the negative exponents apart, where v1 has one ε.
    kge_vectors: for "multi_similarity_v3" and "kge_alignment", an .npz of knowledge-graph
        embeddings ("ids", "vectors") of the pairs' concepts, whose cosine S_KGE sets each pair's margins.
    """

    alpha: float = 1.0
    beta: float = 60.0
    base: float = 0.5
    pos_margin: float = 1.0
    neg_margin: float = 0.5
    kge_vectors: str = ""


@dataclass
class MiningConfig:
    """`[objective.mining]`: which pairs of a batch of names a metric loss sees.

    miner: a registered miner (registry.miners), or "none" to feed every pair to the loss.
    margin: λ, the distance margin a triplet must violate to be kept.
    type_of_triplets: "all" (every violating triplet, SapBERT's choice), "hard" or "semihard".
    """

    miner: str = "triplet_margin"
    margin: float = 0.2
    type_of_triplets: str = "all"


@dataclass
class MarginalConfig:
    """`[objective.marginal]`: the synonym-marginal likelihood over frozen keys.

    tau: the softmax temperature (cosines divided by it).
    top_k: the softmax over each query's top_k keys and its positives only (BioSyn's
        candidates); 0 takes every key.
    own_rows: "exclude" leaves the keys bearing a query's own name out of its softmax;
        "positive" counts those of its concept as positives.
    identity_weight: adds this times the cosine distance between a query and the key of its
        own name (as the keys' model embeds it), which keeps exact names finding themselves.
    refresh_keys_every: re-embed the keys with the model in training every this many steps
        (and at the start): symmetric training, whose model then needs an index of its own.
        0 keeps them frozen.
    """

    tau: float = 0.05
    top_k: int = 0
    own_rows: str = "exclude"
    identity_weight: float = 0.0
    refresh_keys_every: int = 0


@dataclass
class SparseConfig:
    """`[objective.sparse]`: BioSyn's hybrid score, dense cosine + weight × char 3-gram tf-idf
    cosine (the keys' names fitted).

    weight: the weight it starts from (0: dense only).
    learn: train the weight jointly, as BioSyn does, at its own rate `lr` (at the encoder's,
        one scalar would hardly move).
    """

    weight: float = 0.0
    learn: bool = True
    lr: float = 0.001


@dataclass
class PrototypeConfig:
    """`[objective.prototypes]`: CODER++'s batches (batches.PrototypeBatches): concepts_per_batch
    concepts, each with `prototypes` names, `positives` and `hard_negatives` from a FAISS index
    of every name that the model rebuilds every negatives_refresh_every steps (0: once an
    epoch); `pool` keeps that many concepts (0: all)."""

    concepts_per_batch: int = 4
    prototypes: int = 2
    positives: int = 20
    hard_negatives: int = 30
    negatives_refresh_every: int = 0
    pool: int = 0


@dataclass
class DistillConfig:
    """`[objective.distill]`: a student learning its teacher's vectors (loss "distill", batches
    of batches.TextBatches): each micro-batch draws the texts file's sources in these shares
    (data.texts writes it: the index's names, its supplement's names, the train mentions)."""

    names: float = 0.5
    supplement: float = 0.25
    mentions: float = 0.25


@dataclass
class ObjectiveConfig:
    """The `[objective]` section of a training config, with a sub-section for each part.

    loss: a registered loss (registry.losses), resolved once a run (resolve_loss).
    batch_source: a registered batch source (registry.batch_sources), for a loss that does not
        read its own: "pairs" (synonym pairs, SapBERT's batches) or "prototypes". The
        synonym-marginal loss always reads "keys".
    multi_similarity, mining, marginal, sparse, prototypes, distill: the sub-sections above.
    """

    loss: str = "multi_similarity"
    batch_source: str = "pairs"
    multi_similarity: MultiSimilarityConfig = field(default_factory=MultiSimilarityConfig)
    mining: MiningConfig = field(default_factory=MiningConfig)
    marginal: MarginalConfig = field(default_factory=MarginalConfig)
    sparse: SparseConfig = field(default_factory=SparseConfig)
    prototypes: PrototypeConfig = field(default_factory=PrototypeConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)


def resolve_loss(config: ObjectiveConfig) -> Callable:
    """The registered loss function `config.loss` names (one sentence for an unknown name): a
    run resolves it once and hands it to its batch source and objective."""
    return registry.registered(registry.losses, config.loss, "[objective] loss", ObjectiveError)


class SplitMarginMultiSimilarityLoss(losses.MultiSimilarityLoss):
    """Multi-Similarity loss v2 (CL+KGE): per anchor, 1/α log(1 + Σ_pos exp(-α (S - λp))) +
    1/β log(1 + Σ_neg exp(β (S - λn))), with the two margins apart (v1: λp = λn = ε)."""

    def __init__(self, alpha: float, beta: float, pos_margin: float, neg_margin: float):
        super().__init__(alpha=alpha, beta=beta, base=neg_margin)
        self.pos_margin, self.neg_margin = pos_margin, neg_margin

    def margins(self, mat: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The positive and negative margins of every pair of the batch."""
        return torch.full_like(mat, self.pos_margin), torch.full_like(mat, self.neg_margin)

    def _compute_loss(self, mat, pos_mask, neg_mask):
        pos_margin, neg_margin = self.margins(mat)
        pos_loss = (1.0 / self.alpha) * lmu.logsumexp(self.alpha * (pos_margin - mat), keep_mask=pos_mask.bool(),
                                                      add_one=True)
        neg_loss = (1.0 / self.beta) * lmu.logsumexp(self.beta * (mat - neg_margin), keep_mask=neg_mask.bool(),
                                                     add_one=True)
        return {"loss": {"losses": pos_loss + neg_loss, "indices": c_f.torch_arange_from_size(mat),
                         "reduction_type": "element"}}


class KGEMarginMultiSimilarityLoss(SplitMarginMultiSimilarityLoss):
    """Multi-Similarity loss v3 (CL+KGE): each pair's margins follow S_KGE, the cosine of its two
    concepts' knowledge-graph embeddings: λp = |S - S_KGE| and λn = 1 - |S - S_KGE|, with S the
    pair's cosine taken as a constant (the margins steer the gradient; none flows through them).

    kge: (n_labels, d) unit vectors, row i the concept of batch label i.
    """

    def __init__(self, alpha: float, beta: float, kge: torch.Tensor):
        super().__init__(alpha, beta, pos_margin=0.0, neg_margin=0.0)
        self.kge = kge
        self._labels: Optional[torch.Tensor] = None

    def forward(self, embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        self._labels = labels
        return super().forward(embeddings, labels, indices_tuple, ref_emb, ref_labels)

    def margins(self, mat: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        vectors = self.kge.to(mat.device, mat.dtype)[self._labels]
        gap = (mat.detach() - vectors @ vectors.T).abs()
        return gap, 1 - gap


class KGEAlignmentLoss(torch.nn.Module):
    """CL+KGE's "KGE-injected" first stage: the batch's name cosines are drawn towards their
    concepts' knowledge-graph cosines, mean over pairs of names i != j of (S_ij - S_KGE_ij)^2.
    Pairs with a concept the embeddings lack are left out. Use it with miner "none", then
    continue with multi_similarity_v3 from the model it leaves (`spacy project run
    pretrain-kge-injected`).

    kge: (n_labels, d) unit vectors (zero rows: no embedding), row i the concept of label i.
    """

    def __init__(self, kge: torch.Tensor):
        super().__init__()
        self.kge = kge

    def forward(self, embeddings, labels, indices_tuple=None):
        unit = torch.nn.functional.normalize(embeddings, dim=1)
        vectors = self.kge.to(unit.device, unit.dtype)[labels]
        known = vectors.abs().sum(1) > 0
        mask = known[:, None] & known[None, :] & ~torch.eye(len(labels), dtype=torch.bool, device=unit.device)
        if not mask.any():
            return unit.sum() * 0
        return ((unit @ unit.T - vectors @ vectors.T)[mask] ** 2).mean()


@registry.losses.register("kge_alignment")
def kge_alignment(config: ObjectiveConfig, concept_ids: Sequence[str] = ()) -> torch.nn.Module:
    """CL+KGE's KGE-injected stage (KGEAlignmentLoss) over the KGE vectors of `concept_ids`."""
    return KGEAlignmentLoss(kge_table(config.multi_similarity.kge_vectors, concept_ids))


@registry.losses.register("multi_similarity")
def multi_similarity(config: ObjectiveConfig, concept_ids: Sequence[str] = ()) -> torch.nn.Module:
    """SapBERT's Multi-Similarity loss (v1: one centre ε, `base`), pytorch-metric-learning's."""
    ms = config.multi_similarity
    return losses.MultiSimilarityLoss(alpha=ms.alpha, beta=ms.beta, base=ms.base)


@registry.losses.register("multi_similarity_v2")
def multi_similarity_v2(config: ObjectiveConfig, concept_ids: Sequence[str] = ()) -> torch.nn.Module:
    """CL+KGE's Multi-Similarity loss v2: positive and negative margins apart."""
    ms = config.multi_similarity
    return SplitMarginMultiSimilarityLoss(ms.alpha, ms.beta, ms.pos_margin, ms.neg_margin)


@registry.losses.register("multi_similarity_v3")
def multi_similarity_v3(config: ObjectiveConfig, concept_ids: Sequence[str] = ()) -> torch.nn.Module:
    """CL+KGE's Multi-Similarity loss v3: each pair's margins from its concepts' KGE cosine."""
    ms = config.multi_similarity
    return KGEMarginMultiSimilarityLoss(ms.alpha, ms.beta, kge_table(ms.kge_vectors, concept_ids))


def kge_table(path: str, concept_ids: Sequence[str]) -> torch.Tensor:
    """The unit KGE vectors of `concept_ids`, in order, from an .npz ("ids", "vectors"); a concept
    the embeddings lack gets a zero vector (S_KGE 0 with everything)."""
    import numpy as np

    if not path:
        raise ObjectiveError("multi_similarity_v3 and kge_alignment need [objective.multi_similarity] kge_vectors, the .npz that "
                             "`spacy project run kge` writes.")
    with np.load(path) as data:
        row = {str(i): r for r, i in enumerate(data["ids"])}
        vectors = torch.from_numpy(np.asarray(data["vectors"], dtype=np.float32))
    vectors = torch.nn.functional.normalize(vectors, dim=1)
    table = torch.zeros(len(concept_ids), vectors.shape[1])
    found = [(i, row[c]) for i, c in enumerate(concept_ids) if c in row]
    if found:
        table[[i for i, _ in found]] = vectors[[r for _, r in found]]
    return table


@registry.miners.register("triplet_margin")
def _triplet_margin(config: ObjectiveConfig) -> torch.nn.Module:
    return miners.TripletMarginMiner(margin=config.mining.margin, type_of_triplets=config.mining.type_of_triplets)


class ObjectiveError(ValueError):
    """The objective section of a config names something that does not exist."""


class SelfAlignmentObjective(torch.nn.Module):
    """Mine hard pairs in a batch of embeddings and score them with a metric-learning loss.

    config: the loss and miner names and their constants. concept_ids: the concept of each batch
        label, for losses that look concepts up (v3's knowledge-graph embeddings). make_loss:
        the run's resolved loss (resolve_loss), else resolved here.

    Called with embeddings (n, d) and integer concept labels (n,), it returns the loss and the
    number of mined triplets (0 means the batch taught nothing: every triplet met the margin).
    """

    metric_name = "triplets"

    def __init__(self, config: ObjectiveConfig, concept_ids: Sequence[str] = (), make_loss: Optional[Callable] = None):
        super().__init__()
        make_loss = make_loss or resolve_loss(config)
        miner = config.mining.miner
        make_miner = (None if miner == "none"
                      else registry.registered(registry.miners, miner, "[objective.mining] miner (or 'none')", ObjectiveError))
        self.config = config
        self.loss = make_loss(config, concept_ids)
        self.miner: Optional[torch.nn.Module] = None if make_miner is None else make_miner(config)

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

    def settings(self, learned_sparse: bool) -> Dict[str, dict]:
        """What a model trained with this loss records for the pipe (sections of sapbert.json):
        the tau its concepts are ranked by, and the hybrid's sparse weight when it was learned."""
        records = {"marginal": {"tau": self.tau}}
        if learned_sparse:
            records["sparse"] = {"sparse_weight": round(float(self.sparse_weight.detach()), 6), "analyzer": "char_wb",
                                 "ngram_range": [3, 3]}
        return records

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


@registry.losses.register("synonym_marginal")
@registry.reads("keys")
def synonym_marginal(config: ObjectiveConfig, keys: Sequence[torch.Tensor]) -> torch.nn.Module:
    """BioSyn's synonym-marginal likelihood over `keys`, the key sets' vectors, with the hybrid's
    sparse weight learned only where the config starts it above 0."""
    marginal, sparse = config.marginal, config.sparse
    return SynonymMarginalLoss(keys, marginal.tau, marginal.top_k, marginal.own_rows, marginal.identity_weight,
                               sparse.weight, sparse.learn and sparse.weight > 0)


class DistillLoss(torch.nn.Module):
    """The mean cosine distance between the student's vectors and its teacher's (batches.TextBatches
    gives the teacher's unit vectors as targets), as spacy_sapbert's first 3-layer student was
    trained. The student ranks as its teacher does: it records the teacher's ranking settings
    (the synonym-marginal tau, the hybrid's sparse weight) and answers to the teacher's keys."""

    metric_name = "texts"

    def __init__(self, teacher_settings: Dict[str, dict]):
        super().__init__()
        self.teacher_settings = {k: v for k, v in teacher_settings.items() if k in ("marginal", "sparse")}

    def settings(self, learned_sparse: bool) -> Dict[str, dict]:
        return dict(self.teacher_settings)

    def forward(self, embeddings: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, int]:
        cosines = (torch.nn.functional.normalize(embeddings.float(), dim=-1) * targets).sum(dim=-1)
        return (1 - cosines).mean(), len(embeddings)


@registry.losses.register("distill")
@registry.reads("texts")
def distill(config: ObjectiveConfig, teacher_settings: Dict[str, dict]) -> torch.nn.Module:
    """A student's loss against its teacher's vectors (`[objective.distill]` says which texts)."""
    return DistillLoss(teacher_settings)
