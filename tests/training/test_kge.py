"""The ontology graph the KGE trains on, and the vectors it writes for MS loss v3."""
import json

import numpy as np

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert_training.trainer import kge
from spacy_sapbert_training.trainer.objective import kge_table


def _kb():
    return KnowledgeBase([
        Concept("D000001", "disease", types=["C01"]),
        Concept("D000002", "heart disease", types=["C01.100"], xrefs=["MESH:D000001"]),
        Concept("D000003", "arrhythmia", types=["C01.100.200", "C14.280"]),
        Concept("C000004", "familial arrhythmia 1", types=["C01.100.200"], broader=["D000003"]),
        Concept("MONDO:0000005", "long QT", types=["MONDO"], broader=["MONDO:0000006"]),
        Concept("MONDO:0000006", "arrhythmia syndrome", types=["MONDO"]),
    ])


def test_the_graph_has_tree_is_a_and_xref_edges_once():
    triples = kge.graph_triples(_kb())
    assert triples == sorted(set(triples))
    assert ("D000001", "tree_child", "D000002") in triples and ("D000002", "tree_child", "D000003") in triples
    assert ("C000004", "broader", "D000003") in triples and ("MONDO:0000005", "broader", "MONDO:0000006") in triples
    assert ("D000002", "xref", "D000001") in triples
    # a supplementary concept's trees are its descriptor's: it hangs by "broader", not in the tree
    assert not any(t == "C000004" and r == "tree_child" for _, r, t in triples)


def test_trained_vectors_load_as_the_v3_tables(tmp_path):
    rng = np.random.default_rng(0)  # each concept is broader than three others: every entity in many triples
    graph = KnowledgeBase([Concept(f"D{i:06d}", f"node {i}", types=["X"],
                                   broader=[f"D{j:06d}" for j in rng.choice([k for k in range(40) if k != i], 3, replace=False)])
                           for i in range(40)])
    triples = kge.graph_triples(graph)
    assert len(triples) == 120
    vectors, figures = kge.train_kge(triples, dim=4, epochs=2, negatives=2)
    path = kge.write_kge(vectors, figures, tmp_path / "kge.npz")
    assert {"mrr", "hits@10", "entities"} <= set(json.loads(path.with_suffix(".json").read_text()))
    table = kge_table(str(path), ["D000003", "D000001", "unknown"]).numpy()
    assert table.shape == (3, 8)
    assert np.allclose(np.linalg.norm(table[:2], axis=1), 1) and not table[2].any()
