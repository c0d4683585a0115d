"""Train the bundled NER: all-MiniLM-L6-v2 fine-tuned as a BIO token classifier for Disease and
Chemical on the train splits of BC5CDR and NCBI-disease, exported to int8 ONNX for the
torch-free `sapbert_ner` pipe (pipe/tagger.py).

The two corpora annotate differently: BC5CDR marks diseases and chemicals, NCBI-disease only
diseases. Outside NCBI's disease mentions a wordpiece may be a chemical nobody marked, so there
its loss is the marginal likelihood of the tags that leave it outside a disease (O, B- and
I-Chemical) rather than of O alone; BC5CDR's wordpieces and NCBI's disease mentions train on
their one gold tag. Both corpora's Disease mentions share one label.

    python -m spacy_sapbert_training.tagger train --output runs/tagger [--held-out-fold 0]
    python -m spacy_sapbert_training.tagger export runs/tagger/model --output spacy_sapbert/assets/ner
"""
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import typer
from wasabi import msg

from spacy_sapbert.pipe.tagger import FORMAT_VERSION, MODEL_FILE, TAGGER_META, TOKENIZER_FILE, bio_tags, decode_tags, windows

logger = logging.getLogger(__name__)

LABELS = ("Disease", "Chemical")
TAGS = bio_tags(LABELS)
# Which labels each corpus annotates (end_to_end.CORPORA's datasets by corpus).
ANNOTATES = {"bc5cdr": ("Disease", "Chemical"), "ncbi-disease": ("Disease",)}

Mention = Tuple[int, int, str]


def corpus_documents(split: str, data_dir: Path, held_out_fold: Optional[int] = None
                     ) -> Dict[str, List[Tuple[str, List[Mention], str]]]:
    """Each corpus's documents of `split` as (text, mentions, corpus). With `held_out_fold`
    and split "train": {"train": the other folds' documents, "held": fold `held_out_fold`'s}
    (protocol.fold_split over the distinct document ids: a document a corpus repeats, as NCBI
    train does one, is one document here); else {split: every document}."""
    from .data import datasets as ds
    from .data.protocol import fold_split
    from .evaluation.end_to_end import CORPORA

    out: Dict[str, List[Tuple[str, List[Mention], str]]] = {}
    for corpus, datasets in CORPORA.items():
        texts: Dict[str, str] = {}
        mentions: Dict[str, List[Mention]] = {}
        for dataset, label in datasets.items():
            for doc in ds.load_pubtator_split(dataset, split, data_dir, keep_unlinkable=True).documents:
                texts[doc.doc_id] = doc.text
                mentions.setdefault(doc.doc_id, []).extend((m.start, m.end, label) for m in doc.mentions)
        if held_out_fold is None:
            parts = {split: sorted(texts)}
        else:
            held, rest = fold_split(texts, held_out_fold)
            parts = {"held": held, "train": rest}
        for part, doc_ids in parts.items():
            out.setdefault(part, []).extend((texts[i], sorted(mentions.get(i, [])), corpus) for i in doc_ids)
    return out


def allowed_tags(offsets: Sequence[Tuple[int, int]], mentions: Sequence[Mention], corpus: str) -> np.ndarray:
    """(wordpieces, tags) booleans: the tags each wordpiece may take. Inside a mention: B- on
    its first wordpiece, I- on the rest; outside: O, and where the corpus does not annotate a
    label, that label's tags too."""
    allowed = np.zeros((len(offsets), len(TAGS)), dtype=bool)
    unmarked = [label for label in LABELS if label not in ANNOTATES[corpus]]
    outside = [TAGS.index("O")] + [TAGS.index(f"{p}-{label}") for label in unmarked for p in "BI"]
    spans = sorted(mentions)
    m = 0
    opened: Dict[int, bool] = {}
    for i, (s, e) in enumerate(offsets):
        while m < len(spans) and spans[m][1] <= s:
            m += 1
        inside = next((k for k in range(m, min(m + 3, len(spans))) if spans[k][0] <= s < spans[k][1]), None)
        if inside is None:
            allowed[i, outside] = True
            continue
        label = spans[inside][2]
        allowed[i, TAGS.index(f"{'I' if opened.get(inside) else 'B'}-{label}")] = True
        opened[inside] = True
    return allowed


def examples(documents, tokenizer, max_length: int, stride: int) -> List[Tuple[List[int], np.ndarray]]:
    """Wordpiece windows with their allowed tags, as the pipe cuts them (pipe.tagger.windows)."""
    out = []
    for text, mentions, corpus in documents:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
        allowed = allowed_tags(offsets, mentions, corpus)
        for start, end in windows(len(ids), max_length - 2, stride):
            out.append((ids[start:end], allowed[start:end]))
    return out


def span_scores(predicted: Sequence[Sequence[Mention]], gold: Sequence[Sequence[Mention]], corpora: Sequence[str]) -> dict:
    """Exact-span P/R/F1 per corpus and label; a corpus's unannotated labels are not scored."""
    counts: Dict[Tuple[str, str], List[int]] = {}
    for spans, golds, corpus in zip(predicted, gold, corpora):
        golds = {g for g in golds}
        for label in ANNOTATES[corpus]:
            p = {s for s in spans if s[2] == label}
            g = {s for s in golds if s[2] == label}
            for key in ((corpus, label), (corpus, "all")):
                c = counts.setdefault(key, [0, 0, 0])
                c[0] += len(p & g)
                c[1] += len(p - g)
                c[2] += len(g - p)
    result = {}
    for (corpus, label), (tp, fp, fn) in sorted(counts.items()):
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        result[f"{corpus}/{label}"] = {"p": precision, "r": recall, "f": f1}
    return result


def predict(model, tokenizer, texts: Sequence[str], max_length: int, stride: int, batch_size: int = 16) -> List[List[Mention]]:
    """The spans a torch model tags, decoded as the pipe decodes them."""
    import torch

    from spacy_sapbert.pipe.tagger import best_window

    out = []
    model.eval()
    with torch.inference_mode():
        for text in texts:
            encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
            spans = windows(len(ids), max_length - 2, stride)
            batch = [[tokenizer.cls_token_id, *ids[s:e], tokenizer.sep_token_id] for s, e in spans]
            width = max(map(len, batch))
            input_ids = torch.tensor([b + [0] * (width - len(b)) for b in batch])
            mask = torch.tensor([[1] * len(b) + [0] * (width - len(b)) for b in batch])
            probs = torch.softmax(model(input_ids=input_ids, attention_mask=mask).logits, -1).numpy()
            tags = []
            for i in range(len(ids)):
                w = best_window(i, spans)
                tags.append(TAGS[int(probs[w, 1 + i - spans[w][0]].argmax())])
            out.append([(s, e, label) for s, e, label, _ in decode_tags(tags, offsets)])
    return out


def marginal_loss(model, batch, tokenizer):
    """The mean over a batch's wordpieces of −log Σ p(allowed tags): one gold tag, or, for a
    corpus's unannotated labels, every tag that keeps the wordpiece out of its own labels."""
    import torch

    width = max(len(ids) for ids, _ in batch) + 2
    input_ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    allowed = torch.zeros((len(batch), width, len(TAGS)), dtype=torch.bool)
    for row, (ids, tags) in enumerate(batch):
        input_ids[row, :len(ids) + 2] = torch.tensor([tokenizer.cls_token_id, *ids, tokenizer.sep_token_id])
        mask[row, :len(ids) + 2] = 1
        allowed[row, 1:1 + len(ids)] = torch.from_numpy(tags)
    log_probs = torch.log_softmax(model(input_ids=input_ids, attention_mask=mask).logits, -1)
    scored = allowed.any(-1)
    return -torch.logsumexp(log_probs.masked_fill(~allowed, -1e4), -1)[scored].mean()


def train(output: Path, data_dir: Path, held_out_fold: Optional[int], epochs: int, lr: float, batch_size: int,
          max_length: int, stride: int, seed: int, threads: int, warmup: float = 0.1) -> dict:
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from spacy_sapbert.encoders.models import base_model_path

    torch.manual_seed(seed)
    random.seed(seed)
    torch.set_num_threads(threads)
    base = base_model_path()
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForTokenClassification.from_pretrained(
        base, num_labels=len(TAGS), id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)})
    parts = corpus_documents("train", data_dir, held_out_fold)
    train_examples = examples(parts["train"], tokenizer, max_length, stride)
    held = parts.get("held", [])
    msg.info(f"{len(parts['train'])} documents ({len(train_examples)} windows) to train on, {len(held)} held out")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * math.ceil(len(train_examples) / batch_size)
    warm = max(1, int(warmup * steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warm, max(0.0, (steps - step) / max(1, steps - warm))))
    history = []
    output.mkdir(parents=True, exist_ok=True)
    step = 0
    for epoch in range(1, epochs + 1):
        model.train()
        order = list(range(len(train_examples)))
        random.shuffle(order)
        started, total = time.time(), 0.0
        for b in range(0, len(order), batch_size):
            loss = marginal_loss(model, [train_examples[i] for i in order[b:b + batch_size]], tokenizer)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            total += loss.item()
            step += 1
            if step % 50 == 0:
                logger.info("epoch %d step %d/%d loss %.4f (%.0f s)", epoch, step, steps, total / (b // batch_size + 1),
                            time.time() - started)
        record = {"epoch": epoch, "loss": total / math.ceil(len(order) / batch_size), "seconds": time.time() - started}
        if held:
            predicted = predict(model, tokenizer, [t for t, _, _ in held], max_length, stride)
            record["held_out"] = span_scores(predicted, [m for _, m, _ in held], [c for _, _, c in held])
        history.append(record)
        msg.info(json.dumps(record))
        (output / "history.json").write_text(json.dumps(history, indent=2) + "\n")
    model.save_pretrained(output / "model")
    tokenizer.save_pretrained(output / "model")
    settings = {"max_length": max_length, "stride": stride, "epochs": epochs, "lr": lr, "batch_size": batch_size,
                "seed": seed, "held_out_fold": held_out_fold, "tags": TAGS}
    (output / "model" / "tagger_training.json").write_text(json.dumps(settings, indent=2) + "\n")
    return {"history": history, **settings}


def export(model_dir: Path, output: Path) -> Path:
    """The trained classifier as int8 ONNX (MatMul and embedding weights per channel, as the
    encoders' export) with its tokenizer and tagger.json, where the `sapbert_ner` pipe reads it."""
    import tempfile
    import warnings

    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from spacy_sapbert.encoders.export import _quantise_weights

    settings = json.loads((model_dir / "tagger_training.json").read_text())
    model = AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    output.mkdir(parents=True, exist_ok=True)
    sample = tokenizer(["Cisplatin-induced nephrotoxicity.", "Lactic acidosis after metformin."],
                       padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp32 = Path(tmp) / "fp32.onnx"
        torch.onnx.export(model, tuple(sample[n] for n in names), str(fp32), input_names=names,
                          output_names=["logits"],
                          dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, "logits": {0: "batch", 1: "tokens"}},
                          opset_version=17, dynamo=False)
        _quantise_weights(fp32, output / MODEL_FILE)
    tokenizer.backend_tokenizer.save(str(output / TOKENIZER_FILE))
    meta = {"format_version": FORMAT_VERSION, "tags": settings["tags"], "max_length": settings["max_length"],
            "stride": settings["stride"], "cls_id": tokenizer.cls_token_id, "sep_id": tokenizer.sep_token_id,
            "precision": "int8", "base_model": "all-MiniLM-L6-v2",
            "training": {k: v for k, v in settings.items() if k not in ("tags", "max_length", "stride")},
            "trained_on": ["BC5CDR train", "NCBI-disease train"]}
    (output / TAGGER_META).write_text(json.dumps(meta, indent=2) + "\n")
    return output


def bundle(tagger_dir: Path, output: Path, performance: Optional[dict] = None) -> Path:
    """A spaCy pipeline (the biomedical tokenizer, then `sapbert_ner` with the tagger in its
    own folder) at `output`, where load_ner() and `spacy-sapbert link` find it."""
    import shutil

    import spacy

    from spacy_sapbert import __version__
    from spacy_sapbert.pipe.tokenization import biomedical_tokens

    nlp = biomedical_tokens(spacy.blank("en"))
    nlp.add_pipe("sapbert_ner").from_disk(tagger_dir)
    nlp.meta.update({
        "name": "sapbert_ner", "version": __version__, "license": "MIT",
        "description": "Disease and Chemical mentions: all-MiniLM-L6-v2 fine-tuned as a BIO token classifier "
                       "on BC5CDR and NCBI-disease train, int8 ONNX, run without torch.",
        "sources": [{"name": "all-MiniLM-L6-v2", "license": "Apache-2.0"},
                    {"name": "BC5CDR (BioCreative V CDR) train", "license": "free for research"},
                    {"name": "NCBI-disease train", "license": "public domain"}],
        "performance": performance or {},
    })
    if output.exists():
        shutil.rmtree(output)
    nlp.to_disk(output)
    return output


app = typer.Typer(add_completion=False, help=__doc__.splitlines()[0])


@app.command("train")
def train_command(
    output: Path = typer.Option(..., "--output", help="Where the model and history.json go (runs/tagger)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder laid out as ../shared/data (its default)."),
    held_out_fold: Optional[int] = typer.Option(None, "--held-out-fold", help="Hold out this train fold and score it after each epoch (choosing the recipe); none: train on all of train."),
    epochs: int = typer.Option(4, "--epochs"),
    lr: float = typer.Option(1e-4, "--lr"),
    batch_size: int = typer.Option(16, "--batch-size"),
    max_length: int = typer.Option(256, "--max-length", help="Wordpieces a window holds, with [CLS] and [SEP]."),
    stride: int = typer.Option(32, "--stride", help="Wordpieces consecutive windows share."),
    seed: int = typer.Option(0, "--seed"),
    threads: int = typer.Option(2, "--threads"),
):
    """Fine-tune the token classifier on BC5CDR and NCBI-disease train."""
    from .data.datasets import DEFAULT_DATA_DIR

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    train(output, data_dir or DEFAULT_DATA_DIR, held_out_fold, epochs, lr, batch_size, max_length, stride, seed, threads)
    msg.good(f"Wrote {output / 'model'}")


@app.command("export")
def export_command(
    model: Path = typer.Argument(..., help="A trained classifier (runs/tagger/model)."),
    output: Path = typer.Option(..., "--output", help="The tagger directory to write."),
):
    """Export a trained classifier to int8 ONNX for the sapbert_ner pipe."""
    if not (model / "tagger_training.json").exists():
        msg.fail(f"{model} has no tagger_training.json, so it is not a model `tagger train` wrote.", exits=1)
    msg.good(f"Wrote {export(model, output)}")


@app.command("bundle")
def bundle_command(
    tagger: Path = typer.Argument(..., help="An exported tagger directory (`tagger export`)."),
    output: Path = typer.Option(..., "--output", help="Where the pipeline goes (spacy_sapbert/assets/ner to ship it)."),
    metrics: Optional[Path] = typer.Option(None, "--metrics", help="A JSON file of dev scores to record in the pipeline's meta."),
):
    """Wrap an exported tagger in a spaCy pipeline with the biomedical tokenizer."""
    performance = json.loads(metrics.read_text()) if metrics else None
    msg.good(f"Bundled {tagger} into {bundle(tagger, output, performance)}")


if __name__ == "__main__":
    app()
