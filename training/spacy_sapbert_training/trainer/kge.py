"""Knowledge-graph embeddings of the open ontologies (pykeen's ComplEx), for the CL+KGE paper's
Multi-Similarity loss v3, whose pair margins follow the cosine of two concepts' KGE vectors.

The graph is the linking KB's own: MeSH tree parent → child ("tree_child"), MONDO/DOID/HPO is_a
and supplementary concept → its descriptors ("broader"), and cross-references between concepts
of the KB ("xref"). The vectors are written as an .npz of "ids" and "vectors" (ComplEx's real
and imaginary parts side by side), which `objective.kge_vectors` reads.
"""
import json
import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import typer

from spacy_sapbert.kb.concepts import KnowledgeBase

logger = logging.getLogger(__name__)
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

Triple = Tuple[str, str, str]
MESH_DESCRIPTOR = re.compile(r"^D\d{6,9}$")
MESH_TREE = re.compile(r"^[A-Z]\d{2}(\.\d{3})*$")


def graph_triples(kb: KnowledgeBase) -> List[Triple]:
    """(head, relation, tail) between concepts of `kb`, each once, in a fixed order."""
    descriptors = [c for c in kb if MESH_DESCRIPTOR.match(c.concept_id)]
    by_tree = {tree: c.concept_id for c in descriptors for tree in c.types if MESH_TREE.match(tree)}
    triples = set()
    for concept in descriptors:
        for tree in concept.types:
            parent = by_tree.get(tree.rsplit(".", 1)[0]) if "." in tree else None
            if parent and parent != concept.concept_id:
                triples.add((parent, "tree_child", concept.concept_id))
    for concept in kb:
        cid = concept.concept_id
        for relation, others in (("broader", concept.broader), ("xref", concept.xrefs)):
            for other in others:
                target = kb.resolve_id(other.split(":", 1)[1] if other.startswith("MESH:") else other)
                if target and target != cid:
                    triples.add((cid, relation, target))
    return sorted(triples)


def train_kge(triples: List[Triple], dim: int = 64, epochs: int = 100, lr: float = 0.01, negatives: int = 16,
              seed: int = 0) -> Tuple[Dict[str, np.ndarray], dict]:
    """ComplEx embeddings of the triples' entities ({id: real ‖ imaginary vector}) and its
    link-prediction figures on a held-out 5% of the triples (pykeen's rank-based evaluator,
    filtered: MRR, Hits@1, Hits@10)."""
    from pykeen.pipeline import pipeline
    from pykeen.triples import TriplesFactory

    factory = TriplesFactory.from_labeled_triples(np.array(triples, dtype=str), create_inverse_triples=False)
    training, testing, validation = factory.split([0.9, 0.05, 0.05], random_state=seed)
    result = pipeline(training=training, testing=testing, validation=validation, model="ComplEx",
                      model_kwargs={"embedding_dim": dim}, epochs=epochs, random_seed=seed, device="cpu",
                      optimizer_kwargs={"lr": lr}, negative_sampler_kwargs={"num_negs_per_pos": negatives},
                      training_kwargs={"batch_size": 1024}, evaluation_kwargs={"batch_size": 256}, use_tqdm=True)
    entities = result.model.entity_representations[0](indices=None).detach()
    vectors = np.concatenate([entities.real.numpy(), entities.imag.numpy()], axis=1).astype(np.float32)
    labels = factory.entity_id_to_label
    metrics = {name: float(result.metric_results.get_metric(name))
               for name in ("both.realistic.inverse_harmonic_mean_rank", "both.realistic.hits_at_1",
                            "both.realistic.hits_at_10")}
    figures = {"mrr": metrics["both.realistic.inverse_harmonic_mean_rank"],
               "hits@1": metrics["both.realistic.hits_at_1"], "hits@10": metrics["both.realistic.hits_at_10"],
               "entities": factory.num_entities, "relations": factory.num_relations,
               "triples": factory.num_triples, "test_triples": testing.num_triples, "dim": dim, "epochs": epochs,
               "lr": lr, "negatives": negatives}
    return {labels[i]: vectors[i] for i in range(len(labels))}, figures


def write_kge(vectors: Dict[str, np.ndarray], figures: dict, output: Path) -> Path:
    """The .npz `objective.kge_vectors` reads, and its figures beside it (.json)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    ids = sorted(vectors)
    np.savez(output, ids=np.array(ids), vectors=np.stack([vectors[i] for i in ids]))
    output.with_suffix(".json").write_text(json.dumps(figures, indent=2) + "\n")
    return output


@app.command()
def main(
    output: Path = typer.Option(Path("corpus/kge.npz"), "--output", help="Where the vectors go (.npz)."),
    kb_file: Optional[Path] = typer.Option(None, "--kb", help="A KB JSONL; default: the bundled index's KB."),
    dim: int = typer.Option(64, "--dim", help="ComplEx's complex dimension (vectors are twice this)."),
    epochs: int = typer.Option(100, "--epochs"),
    lr: float = typer.Option(0.01, "--lr", help="Adam's learning rate."),
    negatives: int = typer.Option(16, "--negatives", help="Corrupted triples per true one."),
    seed: int = typer.Option(0, "--seed"),
):
    """Train ComplEx on the ontology graph; write its vectors and its link-prediction figures."""
    from spacy_sapbert.kb.bundled import default_kb
    from spacy_sapbert.kb.formats import read_jsonl

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    kb = read_jsonl(kb_file) if kb_file else default_kb()[0]
    triples = graph_triples(kb)
    logger.info("%d triples over %d concepts of %s", len(triples), len(kb), kb.name)
    vectors, figures = train_kge(triples, dim=dim, epochs=epochs, lr=lr, negatives=negatives, seed=seed)
    write_kge(vectors, figures, output)
    typer.echo(json.dumps(figures, indent=2))


if __name__ == "__main__":
    app()
