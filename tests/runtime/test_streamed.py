"""Streamed, resumable index builds: vectors to disk chunk by chunk, indexes filled from them."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_sapbert.search import builders
from spacy_sapbert.cli import app
from spacy_sapbert.search.builders import make_faiss_index
from spacy_sapbert.search.index import ConceptIndex
from spacy_sapbert.search.streamed import PROGRESS_FILE, DiskVectors, encode_to_disk


class Killed(Exception):
    pass


class CountingEncoder:
    """The tiny encoder, counting the names it encodes, killed after `kill_after` calls."""

    def __init__(self, encoder, kill_after=None):
        self.encoder, self.kill_after, self.calls, self.encoded = encoder, kill_after, 0, 0

    def __getattr__(self, name):
        return getattr(self.encoder, name)

    def encode(self, texts, show_progress=None):
        if self.kill_after is not None and self.calls >= self.kill_after:
            raise Killed()
        self.calls += 1
        self.encoded += len(texts)
        return self.encoder.encode(texts, show_progress=False)


def test_a_killed_encoding_resumes_after_its_last_chunk(tiny_kb, tiny_encoder, tmp_path):
    names, _ = tiny_kb.name_rows()
    reference = tiny_encoder.encode(names)
    with pytest.raises(Killed):
        encode_to_disk(names, CountingEncoder(tiny_encoder, kill_after=2), tmp_path, chunk_size=3)
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["chunks_done"] == 2
    resumed = CountingEncoder(tiny_encoder)
    vectors = encode_to_disk(names, resumed, tmp_path, chunk_size=3)
    assert resumed.encoded == len(names) - 6 and len(vectors) == len(names)
    np.testing.assert_allclose(np.asarray(vectors), reference, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(vectors[[5, 0, 7, 5]], np.asarray(vectors)[[5, 0, 7, 5]])
    np.testing.assert_array_equal(vectors[2:9], np.asarray(vectors)[2:9])
    # Other names (or model, or chunk size) in the same folder: started over, not mixed in.
    other = CountingEncoder(tiny_encoder)
    encode_to_disk(names[:-1], other, tmp_path, chunk_size=3)
    assert other.encoded == len(names) - 1


def test_an_index_filled_from_disk_in_chunks_searches_as_one_built_in_memory(monkeypatch, tmp_path):
    vectors = np.random.default_rng(0).standard_normal((5000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "v.npy", vectors)
    on_disk = DiskVectors(tmp_path / "v.npy")
    queries = vectors[:50] + 0.01
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    for index_type in ("flat", "sq8", "hnsw-sq8"):
        in_memory = make_faiss_index(vectors, index_type)
        monkeypatch.setattr(builders, "ADD_CHUNK", 1000)
        streamed = make_faiss_index(on_disk, index_type)
        monkeypatch.undo()
        assert np.array_equal(in_memory.search(queries, 10)[1], streamed.search(queries, 10)[1]), index_type
    # Beyond TRAIN_ROWS a quantiser trains on a sample: its recall stays that of the full one.
    exact = make_faiss_index(vectors, "flat").search(queries, 10)[1]

    def recall(index):
        return np.mean([len(set(t) & set(f)) / 10 for t, f in zip(exact, index.search(queries, 10)[1])])

    full = recall(make_faiss_index(vectors, "sq8"))
    monkeypatch.setattr(builders, "TRAIN_ROWS", 2000)
    assert recall(make_faiss_index(on_disk, "sq8")) >= full - 0.02 and full > 0.9


def test_build_index_resumes_a_killed_build_and_cleans_up(tiny_kb_file, tiny_model, monkeypatch, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    runner = CliRunner()
    command = ["build-index", "--kb", str(tiny_kb_file), "--model", str(tiny_model), "--output", str(tmp_path / "index"),
               "--device", "cpu", "--chunk-size", "4"]
    fresh = ConceptIndex.build(*_kb_and_encoder(tiny_kb_file, tiny_model))
    encode = TorchEncoder.encode
    calls = []

    def dies_after_two_chunks(self, texts, show_progress=None):
        calls.append(len(texts))
        if len(calls) > 2:
            raise KeyboardInterrupt()
        return encode(self, texts, show_progress)

    monkeypatch.setattr(TorchEncoder, "encode", dies_after_two_chunks)
    runner.invoke(app, command)
    assert (tmp_path / "index.partial" / PROGRESS_FILE).exists() and not (tmp_path / "index").exists()
    monkeypatch.undo()
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "Resuming the build" in result.output and not (tmp_path / "index.partial").exists()
    built = ConceptIndex.load(tmp_path / "index")
    np.testing.assert_allclose(built.index.reconstruct_n(0, built.index.ntotal),
                               fresh.index.reconstruct_n(0, fresh.index.ntotal), atol=1e-6, rtol=0)


def _kb_and_encoder(kb_file, model):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.kb.formats import load_kb

    return load_kb(kb_file, "jsonl"), TorchEncoder(model)


def test_a_graph_index_keeps_the_ef_search_it_is_given(tiny_index_dir, tmp_path):
    import faiss

    from spacy_sapbert.search.index import ConceptIndexError

    result = CliRunner().invoke(app, ["convert-index", str(tiny_index_dir), str(tmp_path / "graph"),
                                      "--index-type", "hnsw-sq8", "--ef-search", "1024"])
    assert result.exit_code == 0, result.output
    graph = faiss.downcast_index(ConceptIndex.load(tmp_path / "graph").index)
    assert graph.hnsw.efSearch == 1024
    with pytest.raises(ConceptIndexError, match="hnsw index types"):
        ConceptIndex.load(tiny_index_dir).set_ef_search(512)
