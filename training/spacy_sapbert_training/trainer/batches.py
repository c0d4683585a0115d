"""What the loop trains on, in seeded micro-batches addressable by index (so that a resumed run
reads the batches the killed run would have): synonym pairs for the pair losses, and queries
against frozen key sets for the synonym-marginal loss.

Each kind is a registered batch source (registry.batch_sources), chosen by the config's
`[objective] batch_source` or by the loss that reads it (registry.reads): a function of the
config and the run's TrainingData that checks its inputs at once and returns the loader of its
batches, as spaCy's corpus readers return a function of the pipeline. The batches then give the
loop all it asks of them (Batches), so the loop never asks which kind it has.
"""
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import torch

from spacy_sapbert.cache import file_sha256
from spacy_sapbert.kb.concepts import PathLike

from . import registry
from .config import TrainConfig, TrainingConfigError
from ..data.keys import KeySet, read_keyset
from ..data.pairs import Pair, read_pairs
from .objective import KeyTargets, ObjectiveConfig, SelfAlignmentObjective

Embed = Callable[[Sequence[str]], torch.Tensor]


class Batches(Protocol):
    """What the loop asks of a batch source's batches, whatever their kind."""

    per_epoch: int  # micro-batches in an epoch
    refresh_every: int  # call reembed every this many steps, and at the start (0: never)
    names_per_batch: int  # texts one global micro-batch embeds, over every process
    teacher: Optional[dict]  # the keys' model the trained model answers to, if any

    def __getitem__(self, index: int) -> Tuple[List[str], Any]:
        """Texts and their targets (anything with .to(device)) for micro-batch `index`."""

    def objective(self, make_loss: Callable, config: ObjectiveConfig) -> torch.nn.Module:
        """The objective that scores these batches with the run's loss (`make_loss`, resolved
        once: objective.resolve_loss): called as objective(embeddings, targets), it returns the
        loss and what it found (its metric_name)."""

    def reembed(self, embed: Embed, objective: torch.nn.Module) -> None:
        """Embed again, with `embed` (the model as it is now), what the batches mine from or the
        objective scores against."""

    def identity(self) -> dict:
        """What the run trains on, as a resumed run must find it again."""

    def source_record(self) -> dict:
        """Where the data came from, for the final model's training record."""

    def record(self) -> dict:
        """The data's size and the batches' settings, for the final model's training record."""


@dataclass
class TrainingData:
    """What a run was given to train on: a synonym pairs file (--pairs), key-set folders, each
    with how many times an epoch visits it (--keys), or a texts file (--texts, for a student),
    and where this process stands among torchrun's (rank `rank` of `world_size`)."""

    pairs_path: Optional[Path] = None
    keys: Sequence[Tuple[Path, int]] = ()
    rank: int = 0
    world_size: int = 1
    texts_path: Optional[Path] = None


class _LabelledNames:
    """What the batches of names with concept labels share: they come from a pairs file, and a
    metric loss with a miner scores them (SelfAlignmentObjective)."""

    concept_ids: List[str]
    path: Optional[Path] = None
    teacher: Optional[dict] = None

    def objective(self, make_loss: Callable, config: ObjectiveConfig) -> torch.nn.Module:
        return SelfAlignmentObjective(config, self.concept_ids, make_loss)

    def identity(self) -> dict:
        return {"pairs_sha256": file_sha256(self.path)}

    def source_record(self) -> dict:
        return {"pairs": str(self.path), **self.identity()}


class PairBatches(_LabelledNames):
    """Seeded, epoch-wise shuffled micro-batches of synonym pairs, addressable by index.

    Micro-batch m of the whole run is a pure function of (seed, m), so a resumed run reads
    exactly the batches the killed run would have read. Each global micro-batch holds
    batch_size × world_size pairs; process `rank` takes every world_size-th of them.
    path: the pairs file they were read from, for the run's records.
    """

    refresh_every = 0

    def __init__(self, pairs: Sequence[Tuple[str, str, str]], batch_size: int, seed: int,
                 rank: int = 0, world_size: int = 1, path: Optional[Path] = None):
        if len(pairs) < world_size:
            raise TrainingConfigError(
                f"There are {len(pairs)} pairs but {world_size} processes; give more pairs or fewer processes."
            )
        label_of: Dict[str, int] = {}
        self.labels = torch.tensor([label_of.setdefault(cui, len(label_of)) for cui, _, _ in pairs])
        self.names1 = [p[1] for p in pairs]
        self.names2 = [p[2] for p in pairs]
        self.n_concepts = len(label_of)
        self.concept_ids = list(label_of)  # batch label i is concept_ids[i]
        self.global_batch = batch_size * world_size
        self.per_epoch = max(1, len(pairs) // self.global_batch)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.path = path
        self._epoch, self._order = -1, None

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            self._order = torch.randperm(len(self.names1), generator=generator)
            self._epoch = epoch
        return self._order

    def __getitem__(self, index: int) -> Tuple[List[str], torch.Tensor]:
        """Names (first of each pair, then second) and their labels for micro-batch `index`."""
        epoch, position = divmod(index, self.per_epoch)
        rows = self._epoch_order(epoch)[position * self.global_batch : (position + 1) * self.global_batch]
        rows = rows[self.rank :: self.world_size].tolist()
        names = [self.names1[i] for i in rows] + [self.names2[i] for i in rows]
        labels = self.labels[rows]
        return names, torch.cat([labels, labels])

    @property
    def names_per_batch(self) -> int:
        return 2 * self.global_batch

    def reembed(self, embed: Embed, objective: torch.nn.Module) -> None:
        """Nothing to embed again: in-batch negatives are the batch's own names."""

    def record(self) -> dict:
        return {"n_pairs": len(self.names1), "n_concepts": self.n_concepts}


class QueryBatches:
    """Seeded, epoch-wise shuffled micro-batches of queries against frozen key sets,
    addressable by index.

    Each micro-batch holds queries of one key set (the loss scores them against its keys);
    an epoch takes every key set's queries once, in batches interleaved in a seeded order, so
    the mix follows the key sets' sizes. Micro-batch m is a pure function of (seed, m), and
    process `rank` takes every world_size-th query of each global batch, as PairBatches does.
    With `sparse`, each batch also carries its queries' char 3-gram tf-idf cosines to every key
    (BioSyn's sparse score). `repeats` visits a key set's queries that many times an epoch
    (default once), to weigh a small task up. refresh_every: re-embed the keys every this many
    steps (symmetric training; 0 keeps them frozen). sources: the key sets as given
    ("corpus/keys/cadec*3"), teacher: the model that embedded them, for the run's records.
    """

    def __init__(self, keysets: Sequence[KeySet], batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 sparse: bool = False, repeats: Optional[Sequence[int]] = None, refresh_every: int = 0,
                 sources: Sequence[str] = (), teacher: Optional[dict] = None):
        from spacy_sapbert.search.tfidf import SparseConceptIndex

        self.refresh_every, self.sources, self.teacher = refresh_every, list(sources), teacher
        self.keysets = list(keysets)
        self.repeats = list(repeats or [1] * len(self.keysets))
        self.targets = [keys.targets() for keys in self.keysets]
        self.sparse = [SparseConceptIndex.from_rows(k.names, k.row_concept, k.concepts) for k in self.keysets] if sparse else None
        self.global_batch = batch_size * world_size
        self.counts = [len(keys.queries) // self.global_batch for keys in self.keysets]
        self.counts = [count * repeat for count, repeat in zip(self.counts, self.repeats)]
        if not sum(self.counts):
            raise TrainingConfigError(
                f"The key sets hold fewer queries than one batch of {self.global_batch}; give more queries "
                "or a smaller [training] batch_size."
            )
        self.per_epoch = sum(self.counts)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._epoch, self._plan = -1, []

    def _epoch_plan(self, epoch: int) -> List[Tuple[int, torch.Tensor]]:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            plan = []
            for which, (keys, repeat) in enumerate(zip(self.keysets, self.repeats)):
                for _ in range(repeat):
                    order = torch.randperm(len(keys.queries), generator=generator)
                    plan.extend((which, order[b * self.global_batch : (b + 1) * self.global_batch])
                                for b in range(len(keys.queries) // self.global_batch))
            self._plan = [plan[i] for i in torch.randperm(len(plan), generator=generator).tolist()]
            self._epoch = epoch
        return self._plan

    def __getitem__(self, index: int) -> Tuple[List[str], KeyTargets]:
        """Query texts and their targets for micro-batch `index`."""
        epoch, position = divmod(index, self.per_epoch)
        which, rows = self._epoch_plan(epoch)[position]
        rows = rows[self.rank :: self.world_size].tolist()
        queries, (positives, own) = self.keysets[which].queries, self.targets[which]
        texts = [queries[r][0] for r in rows]
        sparse = None if self.sparse is None else torch.from_numpy(self.sparse[which].score_rows(texts))
        return texts, KeyTargets(
            which, [torch.from_numpy(positives[r]) for r in rows], [torch.from_numpy(own[r]) for r in rows], sparse)

    @property
    def names_per_batch(self) -> int:
        return self.global_batch

    def objective(self, make_loss: Callable, config: ObjectiveConfig) -> torch.nn.Module:
        """The run's loss over the key sets' vectors (a loss that reads "keys")."""
        return make_loss(config, [torch.from_numpy(keys.vectors) for keys in self.keysets])

    def reembed(self, embed: Embed, objective: torch.nn.Module) -> None:
        """Every key set's names as the model embeds them now, into the objective's `keysets`."""
        for which, keys in enumerate(self.keysets):
            objective.keysets[which] = embed(keys.names)

    def identity(self) -> dict:
        return {"keys": self.sources}

    def source_record(self) -> dict:
        return {**self.identity(), "teacher": self.teacher}

    def record(self) -> dict:
        return {"key_sets": [{k: keys.meta.get(k) for k in ("source", "n_names", "n_concepts", "n_queries")}
                             for keys in self.keysets],
                "n_queries": sum(len(keys.queries) for keys in self.keysets)}


class PrototypeBatches(_LabelledNames):
    """CODER++-style batches with dynamic hard negatives, addressable by index.

    Each micro-batch samples `concepts` concepts and, for each: `prototypes` of its names, then
    `positives` names of it that prefer its other synonyms (drawn again when it has few), and
    `negatives` hard negatives: the names of other concepts nearest the prototypes' mean in a
    FAISS index over every name, which `refresh` rebuilds from the model as it trains (the loop
    calls it at the start and every `refresh_every` steps: [objective] negatives_refresh_every,
    0 once an epoch, an epoch being every concept once). The batch's names and concept labels
    go to the pair objective (an MS loss), as a pair batch's do.

    pool: keep only this many concepts (seeded), so a 2-core run's index refresh stays short
        (0 keeps all). refresh_every: 0 refreshes once an epoch. path: the pairs file, for the
        run's records.
    """

    def __init__(self, pairs: Sequence[Tuple[str, str, str]], concepts: int, prototypes: int, positives: int,
                 negatives: int, seed: int, pool: int = 0, rank: int = 0, world_size: int = 1,
                 refresh_every: int = 0, path: Optional[Path] = None):
        names_of: Dict[str, List[str]] = {}
        for cui, first, second in pairs:
            known = names_of.setdefault(cui, [])
            known.extend(n for n in (first, second) if n not in known)
        self.concept_ids = sorted(names_of)
        if pool and pool < len(self.concept_ids):
            keep = torch.randperm(len(self.concept_ids), generator=torch.Generator().manual_seed(seed))[:pool]
            self.concept_ids = sorted(self.concept_ids[i] for i in keep.tolist())
        self.names: List[str] = []
        self.name_label: List[int] = []
        self.rows_of: List[List[int]] = []
        for label, cui in enumerate(self.concept_ids):
            self.rows_of.append(list(range(len(self.names), len(self.names) + len(names_of[cui]))))
            self.names.extend(names_of[cui])
            self.name_label.extend([label] * len(names_of[cui]))
        self.n_concepts = len(self.concept_ids)
        self.concepts, self.prototypes, self.positives, self.negatives = concepts * world_size, prototypes, positives, negatives
        self.per_epoch = max(1, self.n_concepts // self.concepts)
        self.refresh_every, self.path = refresh_every or self.per_epoch, path
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.index = None
        self.vectors = None

    def refresh(self, vectors) -> None:
        """Index every name's vector (unit rows, in self.names order) for the hard negatives."""
        import faiss
        import numpy as np

        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.index = faiss.IndexFlatIP(self.vectors.shape[1])
        self.index.add(self.vectors)

    def reembed(self, embed: Embed, objective: torch.nn.Module) -> None:
        """Index every name as the model embeds it now, for the hard negatives."""
        self.refresh(embed(self.names).cpu().numpy())

    def _hard_negatives(self, label: int, prototype_rows: List[int]) -> List[int]:
        import numpy as np

        query = self.vectors[prototype_rows].mean(0, keepdims=True)
        want = self.negatives + len(self.rows_of[label])
        _, rows = self.index.search(np.ascontiguousarray(query, dtype=np.float32), min(want, len(self.names)))
        return [int(r) for r in rows[0] if r >= 0 and self.name_label[r] != label][: self.negatives]

    def __getitem__(self, index: int) -> Tuple[List[str], torch.Tensor]:
        if self.index is None:
            raise RuntimeError("PrototypeBatches.refresh must index the names before the first batch.")
        epoch, position = divmod(index, self.per_epoch)
        order = torch.randperm(self.n_concepts, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))
        chosen = order[position * self.concepts : (position + 1) * self.concepts][self.rank :: self.world_size].tolist()
        draw = torch.Generator().manual_seed(self.seed * 7919 + index)
        rows: List[int] = []
        for label in chosen:
            own = self.rows_of[label]
            shuffled = [own[i] for i in torch.randperm(len(own), generator=draw).tolist()]
            prototype_rows = shuffled[: self.prototypes]
            others = shuffled[self.prototypes :] or shuffled  # prefer the other synonyms
            picks = torch.randint(len(others), (max(0, self.positives - len(others)),), generator=draw).tolist()
            positive_rows = (others + [others[i] for i in picks])[: self.positives]
            rows += prototype_rows + positive_rows + self._hard_negatives(label, prototype_rows)
        return [self.names[r] for r in rows], torch.tensor([self.name_label[r] for r in rows])

    @property
    def names_per_batch(self) -> int:
        return self.concepts * (self.prototypes + self.positives + self.negatives)

    def record(self) -> dict:
        return {"n_concepts": self.n_concepts, "n_names": len(self.names), "concepts_per_batch": self.concepts,
                "prototypes": self.prototypes, "positives": self.positives, "hard_negatives": self.negatives}


class TextBatches:
    """A student's batches: texts drawn from a texts file's sources (data.texts) in the shares of
    `[objective.distill]`, with their teacher's unit vectors as targets, addressable by index.

    Micro-batch m is a pure function of (seed, m): each source gives its share of the global
    batch, drawn with replacement, and process `rank` takes every world_size-th text. The teacher
    is the model training starts from (`[model] name_or_path`), frozen, as the runtime's fp32
    encoder embeds; the student answers to what the teacher answers to.
    """

    refresh_every = 0

    def __init__(self, texts: Dict[str, List[str]], shares: Dict[str, float], teacher_encoder, batch_size: int,
                 seed: int, rank: int = 0, world_size: int = 1, teacher: Optional[dict] = None,
                 path: Optional[Path] = None):
        self.sources = [(source, texts[source], share) for source, share in shares.items() if share > 0 and texts.get(source)]
        if not self.sources:
            raise TrainingConfigError(f"{path or 'The texts'} holds no texts of the sources [objective.distill] draws "
                                      f"({', '.join(s for s, v in shares.items() if v > 0)}); write it with "
                                      "`python -m spacy_sapbert_training.data.texts`.")
        self.global_batch = batch_size * world_size
        total = sum(share for _, _, share in self.sources)
        counts = [round(self.global_batch * share / total) for _, _, share in self.sources]
        counts[0] += self.global_batch - sum(counts)
        self.counts = counts
        self.encoder, self.teacher, self.path = teacher_encoder, teacher, path
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.per_epoch = max(1, sum(len(pool) for _, pool, _ in self.sources) // self.global_batch)

    def __getitem__(self, index: int) -> Tuple[List[str], torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 100003 + index)
        texts = []
        for (_, pool, _), count in zip(self.sources, self.counts):
            texts += [pool[r] for r in torch.randint(len(pool), (count,), generator=generator).tolist()]
        texts = texts[self.rank :: self.world_size]
        return texts, torch.from_numpy(self.encoder.encode(texts, show_progress=False))

    @property
    def names_per_batch(self) -> int:
        return self.global_batch

    def objective(self, make_loss: Callable, config: ObjectiveConfig) -> torch.nn.Module:
        from spacy_sapbert.encoders.settings import read_settings

        return make_loss(config, read_settings(self.encoder.name_or_path))

    def reembed(self, embed: Embed, objective: torch.nn.Module) -> None:
        pass

    def identity(self) -> dict:
        return {"texts": str(self.path), "texts_sha256": file_sha256(self.path) if self.path else None}

    def source_record(self) -> dict:
        return {**self.identity(), "teacher": self.teacher}

    def record(self) -> dict:
        return {"n_texts": {source: len(pool) for source, pool, _ in self.sources},
                "texts_per_batch": {source: count for (source, _, _), count in zip(self.sources, self.counts)}}


def batch_source(config: TrainConfig, data: TrainingData, make_loss: Callable) -> Callable[[PathLike], Batches]:
    """The loader of the batches a run reads, its inputs checked now: the batch source the run's
    loss (`make_loss`, resolved once: objective.resolve_loss) reads (registry.reads; the
    synonym-marginal loss reads "keys"), else `[objective] batch_source`. The loader takes the
    model training starts from. A batch source is a function of the config, the data and the loss."""
    name = getattr(make_loss, "batch_source", "") or config.objective.batch_source
    make_source = registry.registered(registry.batch_sources, name, "[objective] batch_source", TrainingConfigError)
    return make_source(config, data, make_loss)


def _pairs_file(config: TrainConfig, data: TrainingData) -> Path:
    """The pairs file a loss over named concepts trains on; refused when none was given."""
    if data.pairs_path is None:
        raise TrainingConfigError(f"[objective] loss {config.objective.loss!r} trains on synonym pairs; give them "
                                  "with --pairs (python -m spacy_sapbert_training.data.pairs writes them).")
    return data.pairs_path


def _read_pairs(path: Path) -> List[Pair]:
    pairs = read_pairs(path)
    if not pairs:
        raise TrainingConfigError(f"{path} holds no pairs; build them with `python -m spacy_sapbert_training.data.pairs`.")
    return pairs


@registry.batch_sources.register("pairs")
def pairs_source(config: TrainConfig, data: TrainingData, make_loss: Callable) -> Callable[[PathLike], PairBatches]:
    """SapBERT's batches: the synonym pairs of --pairs, `[training] batch_size` pairs a process."""
    path = _pairs_file(config, data)

    def load(model: PathLike) -> PairBatches:
        run = config.training
        return PairBatches(_read_pairs(path), run.batch_size, run.seed, data.rank, data.world_size, path=path)

    return load


@registry.batch_sources.register("prototypes")
def prototypes_source(config: TrainConfig, data: TrainingData, make_loss: Callable) -> Callable[[PathLike], PrototypeBatches]:
    """CODER++'s batches over the names of --pairs: per concept prototypes, positives and hard
    negatives (`[objective.prototypes]`)."""
    path = _pairs_file(config, data)

    def load(model: PathLike) -> PrototypeBatches:
        o = config.objective.prototypes
        return PrototypeBatches(_read_pairs(path), o.concepts_per_batch, o.prototypes, o.positives, o.hard_negatives,
                                config.training.seed, o.pool, data.rank, data.world_size,
                                refresh_every=o.negatives_refresh_every, path=path)

    return load


@registry.batch_sources.register("keys")
def keys_source(config: TrainConfig, data: TrainingData, make_loss: Callable) -> Callable[[PathLike], QueryBatches]:
    """BioSyn's batches: the queries of the key sets of --keys, `[training] batch_size` a process,
    against their keys. Frozen keys (`[objective.marginal] refresh_keys_every` 0) make the trained
    model answer to the model that embedded them, which training must start from."""
    loss = config.objective.loss
    if getattr(make_loss, "batch_source", "") != "keys":
        raise TrainingConfigError(f"[objective] batch_source 'keys' gives queries against key sets, which loss {loss!r} "
                                  "does not score; use pairs or prototypes.")
    if not data.keys:
        raise TrainingConfigError(f"[objective] loss {loss!r} trains against frozen keys; give key sets "
                                  "with --keys (python -m spacy_sapbert_training.data.keys writes them).")

    def load(model: PathLike) -> QueryBatches:
        marginal, run = config.objective.marginal, config.training
        keysets = [read_keyset(folder) for folder, _ in data.keys]
        # Symmetric training (refresh_keys_every) embeds its own keys: it answers to itself.
        teacher = None if marginal.refresh_keys_every else keys_model(keysets, model, config.model.max_length)
        return QueryBatches(keysets, run.batch_size, run.seed, data.rank, data.world_size,
                            sparse=config.objective.sparse.weight > 0, repeats=[repeat for _, repeat in data.keys],
                            refresh_every=marginal.refresh_keys_every,
                            sources=[f"{k}*{r}" if r > 1 else str(k) for k, r in data.keys], teacher=teacher)

    return load


def keys_model(keysets: Sequence[KeySet], source: PathLike, max_length: int) -> dict:
    """The model that embedded the frozen keys, which the trained model will answer to; the
    model training starts from (`source`) must already answer to it (start in the keys' space)."""
    from spacy_sapbert.encoders.transformer import TorchEncoder

    spaces = {(keys.meta["model"], keys.fingerprint) for keys in keysets}
    if len(spaces) > 1:
        raise TrainingConfigError(f"The key sets were embedded by different models ({sorted(spaces)}); "
                                  "write them all with one --model.")
    (model, fingerprint), = spaces
    own = TorchEncoder(source, max_length=max_length).fingerprint
    if own != fingerprint:
        raise TrainingConfigError(
            f"The key sets were embedded by {model!r} (fingerprint {fingerprint}), but {source} answers to "
            f"{own}: the query encoder must start in the keys' vector space. Start from that model, or "
            "write the key sets with this one (python -m spacy_sapbert_training.data.keys --model)."
        )
    return {"teacher": model, "fingerprint": fingerprint}


@registry.batch_sources.register("texts")
def texts_source(config: TrainConfig, data: TrainingData, make_loss: Callable) -> Callable[[PathLike], TextBatches]:
    """A student's batches: the texts of --texts with the vectors of the model training starts
    from, which the student (its `[model] layers`) learns to give."""
    from ..data.texts import read_texts

    loss = config.objective.loss
    if getattr(make_loss, "batch_source", "") != "texts":
        raise TrainingConfigError(f"[objective] batch_source 'texts' gives texts with a teacher's vectors, which loss "
                                  f"{loss!r} does not score; use loss distill.")
    if data.texts_path is None:
        raise TrainingConfigError(f"[objective] loss {loss!r} trains on texts; give them with --texts "
                                  "(python -m spacy_sapbert_training.data.texts writes them).")
    texts = read_texts(data.texts_path)

    def load(model: PathLike) -> TextBatches:
        from spacy_sapbert.encoders.transformer import TorchEncoder

        # The teacher is the model the run started from, also when it resumes from a student's checkpoint.
        teacher = TorchEncoder(config.model.name_or_path, max_length=config.model.max_length, batch_size=256)
        run = config.training
        record = {"teacher": teacher.teacher or str(config.model.name_or_path), "fingerprint": teacher.fingerprint}
        return TextBatches(texts, asdict(config.objective.distill), teacher, run.batch_size, run.seed, data.rank,
                           data.world_size, teacher=record, path=data.texts_path)

    return load
