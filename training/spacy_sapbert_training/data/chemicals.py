"""The chemicals the bundled index's descriptors do not name: MeSH's supplementary chemical
concepts (drugs in development, salts, reagents; C… ids mapped to descriptors of tree D) and
the drug names MeSH lacks (brand and former names, kb.drug_names), as one KB for the bundled
index's supplement (search.supplement):

    python -m spacy_sapbert_training.data.chemicals kb --linking-kb corpus/linking_kb.jsonl \
        --output corpus/chemicals_kb.jsonl
    spacy-sapbert build-index --kb corpus/chemicals_kb.jsonl --model default --output runs/chemicals-index ...
    python -m spacy_sapbert_training.data.chemicals pack runs/chemicals-index \
        spacy_sapbert_index/index/supplement --dim 320 --pq-bytes 40

A supplementary concept keeps all its names. A concept of the linking KB appears with only the
drug names it lacks, under its own id, so that the supplement adds rows and never a second
concept; a drug name any concept already bears is left to that concept."""
from dataclasses import replace
from pathlib import Path
from typing import Dict, List

import typer

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.kb.drug_names import drug_key, drug_name_variants
from spacy_sapbert.kb.formats import read_jsonl, write_jsonl

from .ontology import load_source

CHEMICAL_TREES = ("D",)


def chemicals_kb(linking: KnowledgeBase, supplementary: KnowledgeBase) -> KnowledgeBase:
    """The supplement: `supplementary`'s concepts `linking` lacks, then the drug names of
    kb.drug_names that no concept of either bears, each under every chemical concept bearing
    its drug's name (in `linking`'s order, then the supplement's)."""
    new = [c for c in supplementary if c.concept_id not in linking.cui_to_entity and c.has_type(CHEMICAL_TREES)]
    chemicals = [c for c in linking if c.has_type(CHEMICAL_TREES)] + new
    owners: Dict[str, Dict[str, None]] = {}
    for concept in list(linking) + new:  # every name any concept bears, chemical or not
        for name in concept.names:
            owners.setdefault(drug_key(name), {})
    for concept in chemicals:
        for name in concept.names:
            owners[drug_key(name)][concept.concept_id] = None
    added: Dict[str, Dict[str, str]] = {}
    for drug, variants in drug_name_variants().items():
        drug_owners = owners.get(drug_key(drug))
        if not drug_owners:
            continue
        for variant in variants:
            if drug_key(variant) not in owners:
                for concept_id in drug_owners:
                    added.setdefault(concept_id, {}).setdefault(drug_key(variant), variant)
    concepts: List[Concept] = [
        replace(c, aliases=c.aliases + sorted(added.pop(c.concept_id, {}).values())) for c in new
    ]
    for concept in linking:
        names = sorted(added.get(concept.concept_id, {}).values())
        if names:
            concepts.append(Concept(concept.concept_id, names[0], names[1:], concept.types))
    return KnowledgeBase(concepts, name="mesh-supplementary-chemicals+drug-names", version=supplementary.version)


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command("kb")
def kb_command(linking_kb: Path = typer.Option(..., help="The linking KB the bundled index holds (KB JSONL)"),
               output: Path = typer.Option(..., help="The supplement's KB to write (KB JSONL)")):
    """Write the supplement's KB."""
    linking = read_jsonl(linking_kb)
    kb = chemicals_kb(linking, load_source("mesh-supplementary:" + "/".join(CHEMICAL_TREES)))
    write_jsonl(kb, output)
    n_new = sum(c.concept_id not in linking.cui_to_entity for c in kb)
    n_names = sum(len(c.names) for c in kb)
    typer.echo(f"{output}: {n_new} supplementary chemical concepts and drug names for {len(kb) - n_new} "
               f"of the linking KB's, {n_names} names.")


@app.command("pack")
def pack_command(source: Path = typer.Argument(..., help="A flat index of the supplement's KB (build-index)"),
                 output: Path = typer.Argument(..., help="The supplement folder to write (supplement/ of an index)"),
                 dim: int = typer.Option(320, help="Dimensions the names are projected to"),
                 pq_bytes: int = typer.Option(40, help="Bytes of each name's product-quantised code"),
                 nprobe: int = typer.Option(32, help="Inverted lists a query visits")):
    """Pack a flat index of the supplement's KB as inverted lists of product-quantised codes."""
    import time

    from spacy_sapbert.search.builders import make_faiss_index
    from spacy_sapbert.search.index import ConceptIndex
    from spacy_sapbert.search.supplement import save_supplement

    start = time.perf_counter()
    flat = ConceptIndex.load(source)
    index = make_faiss_index(flat.index.reconstruct_n(0, flat.index.ntotal), "ivfpq", dim, pq_bytes=pq_bytes)
    import faiss

    faiss.extract_index_ivf(index).nprobe = nprobe
    packed = ConceptIndex(flat.kb, index, flat.row_concepts, dict(
        flat.meta, index_type="ivfpq", projected_dim=dim, pq_bytes=pq_bytes, nprobe=nprobe,
        build_seconds=round(flat.meta.get("build_seconds", 0) + time.perf_counter() - start, 1)))
    save_supplement(packed, output)
    size = sum(f.stat().st_size for f in output.iterdir())
    typer.echo(f"{output}: {len(packed)} names of {len(flat.concept_ids)} concepts, {size / 1e6:.1f} MB.")


if __name__ == "__main__":
    app()
