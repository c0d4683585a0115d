"""What the loop trains on, in seeded micro-batches addressable by index (so that a resumed run
reads the batches the killed run would have): synonym pairs for the pair losses, and queries
against frozen key sets for the synonym-marginal loss."""
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .config import TrainingConfigError
from .keys import KeySet
from .objective import KeyTargets


class PairBatches:
    """Seeded, epoch-wise shuffled micro-batches of synonym pairs, addressable by index.

    Micro-batch m of the whole run is a pure function of (seed, m), so a resumed run reads
    exactly the batches the killed run would have read. Each global micro-batch holds
    batch_size × world_size pairs; process `rank` takes every world_size-th of them.
    """

    def __init__(self, pairs: Sequence[Tuple[str, str, str]], batch_size: int, seed: int,
                 rank: int = 0, world_size: int = 1):
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
    (default once), to weigh a small task up.
    """

    def __init__(self, keysets: Sequence[KeySet], batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 sparse: bool = False, repeats: Optional[Sequence[int]] = None):
        from spacy_sapbert.sparse import SparseConceptIndex

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

    def record(self) -> dict:
        return {"key_sets": [{k: keys.meta.get(k) for k in ("source", "n_names", "n_concepts", "n_queries")}
                             for keys in self.keysets],
                "n_queries": sum(len(keys.queries) for keys in self.keysets)}


class PrototypeBatches:
    """CODER++-style batches with dynamic hard negatives, addressable by index.

    Each micro-batch samples `concepts` concepts and, for each: `prototypes` of its names, then
    `positives` names of it that prefer its other synonyms (drawn again when it has few), and
    `negatives` hard negatives: the names of other concepts nearest the prototypes' mean in a
    FAISS index over every name, which `refresh` rebuilds from the model as it trains (the loop
    calls it at the start and every `refresh_every` steps: [objective] negatives_refresh_every,
    0 once an epoch, an epoch being every concept once). The batch's names and concept labels
    go to the pair objective (an MS loss), as a pair batch's do.

    pool: keep only this many concepts (seeded), so a 2-core run's index refresh stays short
        (0 keeps all).
    """

    def __init__(self, pairs: Sequence[Tuple[str, str, str]], concepts: int, prototypes: int, positives: int,
                 negatives: int, seed: int, pool: int = 0, rank: int = 0, world_size: int = 1):
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

    def record(self) -> dict:
        return {"n_concepts": self.n_concepts, "n_names": len(self.names), "concepts_per_batch": self.concepts,
                "prototypes": self.prototypes, "positives": self.positives, "hard_negatives": self.negatives}
