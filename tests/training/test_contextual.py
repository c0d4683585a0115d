"""Contextual mentions (CL+KGE), the model side: [Ms] and [Me] added to the tokenizer, the
vector the mean over the mention's tokens, the mode recorded beside the model, and the pipe and
the harness asking mentions in their sentence's window."""

import numpy as np
import pytest
import torch

from spacy_sapbert.encoders.base import MENTION_END, MENTION_START, recorded_context
from conftest import DEMO_PATTERNS, ruler_nlp
from test_project import _write_context_pairs
from spacy_sapbert_training.trainer.config import TrainConfig, TrainingConfigError
from spacy_sapbert_training.trainer.loop import Trainer

WINDOW, MAX_LENGTH = 12, 48  # the tiny model has 64 positions


@pytest.fixture(scope="module")
def contextual_model(tiny_model, tiny_kb_file, tmp_path_factory):
    folder = tmp_path_factory.mktemp("contextual")
    _write_context_pairs(folder / "pairs.txt.gz", tiny_kb_file)
    config = TrainConfig.from_dict({
        "model": {"name_or_path": str(tiny_model), "pooling": "mention", "max_length": MAX_LENGTH, "window": WINDOW},
        "training": dict(batch_size=4, max_steps=3, lr=1e-2, device="cpu", seed=0, log_every=1),
    })
    return Trainer(config, folder / "pairs.txt.gz", folder / "run").train()


def test_the_markers_are_tokens_of_their_own_and_the_mode_is_recorded(contextual_model, tiny_model):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    encoder = TorchEncoder(contextual_model)
    ids = encoder.tokenizer("took [Ms] Metformin [Me] daily")["input_ids"]
    assert [encoder.tokenizer.convert_ids_to_tokens(i) for i in ids].count(MENTION_START) == 1
    assert encoder.markers == tuple(encoder.tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END]))
    assert encoder.model.config.vocab_size == TorchEncoder(tiny_model).model.config.vocab_size + 2
    assert recorded_context(contextual_model) == {"window": WINDOW, "max_length": MAX_LENGTH}
    # A contextual model keeps the room its windows trained with, whatever max_length is asked.
    assert encoder.pooling == "mention" and encoder.context["window"] == WINDOW and encoder.max_length == MAX_LENGTH


def test_the_vector_is_the_mean_over_the_mentions_tokens_and_a_name_pools_every_token(contextual_model):
    from spacy_sapbert.encoders.transformer import TorchEncoder

    encoder = TorchEncoder(contextual_model)
    texts = ["patients took [Ms] lactic acidosis [Me] daily", "lactic acidosis"]
    batch = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder.model(**batch).last_hidden_state
    tokens = encoder.tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    inside = slice(tokens.index(MENTION_START) + 1, tokens.index(MENTION_END))
    expected = [hidden[0, inside].mean(0), hidden[1, batch["attention_mask"][1].bool()].mean(0)]
    expected = torch.nn.functional.normalize(torch.stack(expected), dim=-1).numpy()
    np.testing.assert_allclose(encoder.encode(texts), expected, atol=1e-5)
    # The context moves the vector: the same mention elsewhere is another vector.
    other = encoder.encode(["no one had [Ms] lactic acidosis [Me] then"])[0]
    assert float(other @ encoder.encode(texts[:1])[0]) < 0.99999


def test_the_onnx_export_pools_as_torch(contextual_model):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.encoders.loading import load_encoder

    texts = ["patients took [Ms] lactic acidosis [Me] daily", "metformin", "[Ms] metformin [Me]"]
    exact = TorchEncoder(contextual_model).encode(texts)
    for precision, least in (("fp32", 0.9999), ("int8", 0.95)):
        encoder = load_encoder(contextual_model, precision)
        assert encoder.context["window"] == WINDOW and encoder.max_length == MAX_LENGTH
        assert float(np.min(np.sum(encoder.encode(texts) * exact, axis=1))) > least, precision


def test_the_pipe_encodes_each_mention_in_its_sentence(contextual_model, tiny_kb, tmp_path):
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.search.index import ConceptIndex

    index_dir = ConceptIndex.build(tiny_kb, TorchEncoder(contextual_model)).save(tmp_path / "index")
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sentencizer", first=True)
    linker = nlp.add_pipe("sapbert_linker", config={
        "encoder": {"model": str(contextual_model)}, "index": {"index": str(index_dir)}, "threshold": 0.0, "k": 5})
    linker.initialize()
    asked = []
    encode = linker.encoder.encode
    linker.encoder.encode = lambda texts, **kw: asked.extend(texts) or encode(texts, **kw)
    text = "Cisplatin was given. Two patients with type 2 diabetes took metformin daily and felt well."
    doc = nlp(text)
    assert "Two patients with [Ms] type 2 diabetes [Me] took metformin daily and felt well" in asked  # 12 tokens
    assert "[Ms] Cisplatin [Me] was given." in asked
    assert all(ent._.cui for ent in doc.ents)
    # The same input gives the same links; the index matches the mention, not its window.
    again = nlp(text)
    assert [(e._.cui, e._.cui_score) for e in again.ents] == [(e._.cui, e._.cui_score) for e in doc.ents]
    # Saved and loaded, the pipeline still links in context (the mode travels in its model folder).
    import spacy

    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("sapbert_linker").encoder.context["window"] == WINDOW
    assert [(e._.cui, e._.cui_score) for e in loaded(text).ents] == [(e._.cui, e._.cui_score) for e in doc.ents]
    linker.exact_match = True
    linker.generator.clear_cache()
    assert nlp(text).ents[1]._.cui_score == 1.0


def test_the_harness_asks_a_mention_in_its_window_or_alone(tiny_kb):
    from spacy_sapbert_training.data.datasets import Mention
    from spacy_sapbert_training.evaluation.evaluate import Task, part_windows
    from spacy_sapbert_training.data.protocol import Query

    text = "Metformin helps. Then lactic acidosis came."
    start = text.index("lactic")
    mentions = [Mention("d1", start, start + len("lactic acidosis"), "lactic acidosis", "Disease", ["D000140"]),
                Mention("cadec", 0, 4, "pain", "ADR", ["X"])]
    queries = [Query(mentions[0], ["lactic acidosis"], ["D000140"]), Query(mentions[1], ["pain"], ["X"])]
    task = Task(queries, tiny_kb, documents={"d1": text})
    assert part_windows(task, window=4) == [["Then [Ms] lactic acidosis [Me] came"], ["[Ms] pain [Me]"]]


def test_mention_pooling_is_refused_with_an_adapter(tiny_model):
    with pytest.raises(TrainingConfigError, match="marker tokens"):
        TrainConfig.from_dict({"model": {"name_or_path": str(tiny_model), "pooling": "mention", "adapter": "lora"}})
