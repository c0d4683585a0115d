"""Distil a small student that embeds mentions into its teacher's vector space.

The student is the teacher with fewer layers (every other one, by default), trained so that
its unit vectors match the teacher's on ontology names and training mentions (loss: 1 − cosine).
It answers to its teacher's fingerprint (`sapbert_teacher.json`), so the teacher's index, whose
names the teacher embedded exactly, serves it: only mentions go through the student.

    python -m training.distill --output runs/distill --kb-index INDEX_DIR --mentions ncbi-disease,bc5cdr
"""
import json
import logging
import math
import time
from pathlib import Path
from typing import List, Sequence

import numpy as np
import torch
import typer

from spacy_sapbert.defaults import DEFAULT, resolve_model
from spacy_sapbert.encoder import TEACHER_FILE, Encoder
from spacy_sapbert.index import ConceptIndex

from .loop import PairEncoder, save_model, seed_everything

logger = logging.getLogger(__name__)
TRAIN_MENTIONS = {"ncbi-disease": ["ncbi-disease"], "bc5cdr": ["bc5cdr-disease", "bc5cdr-chemical"]}


def student_from(teacher: Encoder, layers: Sequence[int]) -> torch.nn.Module:
    """A copy of the teacher's transformer keeping only `layers` (indices into its encoder)."""
    import copy

    model = copy.deepcopy(teacher.model).float()
    kept = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
    model.encoder.layer = kept
    model.config.num_hidden_layers = len(kept)
    return model


def train_mentions(data_dir: Path, corpora: Sequence[str]) -> List[str]:
    """Distinct mention texts of the train splits of `corpora` (texts only; never committed)."""
    from .datasets import load_pubtator_split

    texts = set()
    for corpus in corpora:
        for dataset in TRAIN_MENTIONS[corpus]:
            for document in load_pubtator_split(dataset, "train", data_dir).documents:
                texts.update(m.text for m in document.mentions)
    return sorted(texts)


def distill(
    output: Path,
    kb_index: Path,
    teacher: str = DEFAULT,
    mentions: Sequence[str] = (),
    data_dir: Path = Path("../shared/data"),
    layers: Sequence[int] = (1, 3, 5),
    epochs: int = 2,
    batch_size: int = 64,
    lr: float = 1e-4,
    max_steps: int = 0,
    seed: int = 13,
) -> Path:
    """Train the student and write it (with its teacher's fingerprint) to output/model."""
    seed_everything(seed)
    teacher_encoder = Encoder(resolve_model(teacher))
    if str(kb_index) == DEFAULT:
        from spacy_sapbert.defaults import exact_default_index_path

        kb_index = exact_default_index_path(teacher_encoder)
    index = ConceptIndex.load(kb_index, encoder=teacher_encoder)
    if index.meta.get("index_type") not in ("flat", "hnsw"):
        raise ValueError(f"{kb_index} is a {index.meta.get('index_type')} index; give an exact (flat) one, "
                         "whose vectors are the teacher's own.")
    names, _ = index.kb.name_rows()
    texts = list(names)
    targets = [index.index.reconstruct_n(0, index.index.ntotal)]
    extra = train_mentions(data_dir, mentions) if mentions else []
    if extra:
        texts += extra
        targets.append(teacher_encoder.encode(extra, show_progress=True))
    target = torch.from_numpy(np.vstack(targets))
    student = PairEncoder(student_from(teacher_encoder, layers), teacher_encoder.pooling)
    student.train()
    tokenizer = teacher_encoder.tokenizer
    optimizer = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    per_epoch = math.ceil(len(texts) / batch_size)
    total = max_steps or per_epoch * epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / total))
    output.mkdir(parents=True, exist_ok=True)
    log = (output / "metrics.jsonl").open("a")
    generator = torch.Generator().manual_seed(seed)
    step, start, running = 0, time.perf_counter(), 0.0
    while step < total:
        for rows in torch.randperm(len(texts), generator=generator).split(batch_size):
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                              max_length=teacher_encoder.max_length, return_tensors="pt")
            vectors = torch.nn.functional.normalize(student(**batch), dim=-1)
            loss = (1 - (vectors * target[rows]).sum(-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            running = 0.98 * running + 0.02 * loss.item() if step > 1 else loss.item()
            if step % 50 == 0 or step == total:
                record = {"step": step, "loss": round(running, 5), "seconds": round(time.perf_counter() - start, 1)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                logger.warning("step %d/%d loss %.4f (%.0f s)", step, total, running, record["seconds"])
            if step % 500 == 0 or step == total:
                _save(student, tokenizer, output / "model", teacher, teacher_encoder, layers, step)
            if step >= total:
                break
    log.close()
    return output / "model"


def _save(student, tokenizer, path: Path, teacher: str, teacher_encoder: Encoder, layers, step: int) -> None:
    save_model(student, tokenizer, path)
    record = {"teacher": teacher, "fingerprint": teacher_encoder.fingerprint, "layers": list(layers), "steps": step}
    (path / TEACHER_FILE).write_text(json.dumps(record, indent=2) + "\n")


def main(
    output: Path = typer.Option(..., "--output", help="Run folder; the student goes to OUTPUT/model."),
    kb_index: Path = typer.Option(..., "--kb-index", help="The teacher's exact (flat) index, or default (its MeSH index)."),
    teacher: str = typer.Option(DEFAULT, "--teacher", help="Teacher model directory, or default."),
    mentions: str = typer.Option("", "--mentions", help="Train-split mentions to add: ncbi-disease, bc5cdr."),
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir"),
    layers: str = typer.Option("1,3,5", "--layers", help="Teacher layers the student keeps."),
    epochs: int = typer.Option(2, "--epochs"),
    batch_size: int = typer.Option(64, "--batch-size"),
    lr: float = typer.Option(1e-4, "--lr"),
    max_steps: int = typer.Option(0, "--max-steps", help="Stop after this many steps (0: epochs)."),
):
    """Distil a fewer-layer student into the teacher's vector space."""
    chosen = [m for m in mentions.split(",") if m]
    unknown = [m for m in chosen if m not in TRAIN_MENTIONS]
    if unknown:
        raise typer.BadParameter(f"Unknown mention corpora {unknown}; use {', '.join(TRAIN_MENTIONS)}.")
    path = distill(output, kb_index, teacher, chosen, data_dir, [int(i) for i in layers.split(",")],
                   epochs, batch_size, lr, max_steps)
    typer.echo(f"Wrote the student to {path}")


if __name__ == "__main__":
    typer.run(main)
