"""`python -m training.package`: a trained model in fp16 safetensors with a model card.

The output is what spacy_sapbert/assets/model holds: weights in fp16 (sharded into files of
at most 15 MB), the tokenizer, the pooling record, the training record and MODEL_CARD.md with
the data, steps, hardware, wall time, dev figures and licences. Build the index with the
packaged model (its fp16 weights have their own fingerprint), not with the fp32 one.
"""
import json
import logging
import shutil
from pathlib import Path
from typing import Optional

import torch
import typer
from transformers import AutoModel, AutoTokenizer

from spacy_sapbert.encoder import POOLING_FILE

from .loop import RUN_FILE

logger = logging.getLogger(__name__)
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

LICENCES = """\
- Base encoder all-MiniLM-L6-v2 (sentence-transformers): Apache-2.0.
- MeSH: courtesy of the U.S. National Library of Medicine (NLM terms and conditions).
- MONDO, DOID, HPO, ChEBI: CC BY 4.0 (HPO under its own licence: hpo.jax.org/license).
- Fine-tuning corpora (NCBI-disease, BC5CDR, CADEC): research licences of their authors; the
  model holds weights trained on them, no corpus text.
"""


def model_card(record: dict, metrics_summary: Optional[str]) -> str:
    """MODEL_CARD.md from a run's training record and an evaluation summary."""
    lines = [
        "# spacy-sapbert model", "",
        "A biomedical name encoder trained with SapBERT's self-alignment objective "
        "(Multi-Similarity loss over hard triplets mined online) for `sapbert_linker`.", "",
        "## Training", "",
        f"- Base model: `{record.get('base_model', '?')}`",
        f"- Pairs: {record.get('n_pairs', '?')} synonym pairs of {record.get('n_concepts', '?')} concepts "
        f"(`{Path(str(record.get('pairs', '?'))).name}`, sha256 {str(record.get('pairs_sha256', '?'))[:12]}…)",
        f"- Steps: {record.get('steps', '?')} of {record.get('names_per_step', '?')} names",
        f"- Hardware: {record.get('hardware', '?')}; wall time {record.get('wall_seconds', '?')} s; torch {record.get('torch', '?')}",
        f"- Config: `{json.dumps(record.get('config', {}), sort_keys=True)}`",
        "", "## Dev figures", "",
        metrics_summary.strip() if metrics_summary else "Not evaluated yet: run `spacy project run evaluate-trained`.",
        "", "## Licences", "", LICENCES,
    ]
    return "\n".join(lines)


def package_model(model: Path, output: Path, metrics: Optional[Path] = None) -> Path:
    """Write `model` to `output` in fp16 with tokenizer, pooling, training record and card."""
    if not (model / "config.json").exists():
        raise FileNotFoundError(f"{model} has no config.json; point --model at a trained model directory.")
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    weights = AutoModel.from_pretrained(str(model), dtype=torch.float16)
    weights.save_pretrained(output, max_shard_size="15MB")
    AutoTokenizer.from_pretrained(str(model)).save_pretrained(output)
    record = {}
    for name in (POOLING_FILE, RUN_FILE):
        if (model / name).exists():
            shutil.copy(model / name, output / name)
    if (model / RUN_FILE).exists():
        record = json.loads((model / RUN_FILE).read_text())
    summary = None
    if metrics is not None and (metrics / "summary.md").exists():
        summary = (metrics / "summary.md").read_text().replace("# Evaluation summary", "").strip()
    (output / "MODEL_CARD.md").write_text(model_card(record, summary))
    size = sum(p.stat().st_size for p in output.iterdir()) / 1e6
    logger.info("Packaged %s into %s (%.1f MB).", model, output, size)
    return output


@app.command()
def main(
    model: Path = typer.Option(..., "--model", help="Trained model directory (runs/finetune/model)."),
    output: Path = typer.Option(..., "--output", help="Folder to write the packaged model to."),
    metrics: Optional[Path] = typer.Option(None, "--metrics", help="Folder with the model's evaluation summary.md."),
) -> None:
    """Write a trained model in fp16 with a model card."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = package_model(model, output, metrics)
    except FileNotFoundError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)
    typer.echo(f"Packaged model written to {path}")


if __name__ == "__main__":
    app()
