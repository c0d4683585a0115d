"""`python -m spacy_sapbert_training.trainer.package`: a trained model in fp16 safetensors with a model card.

The output is what dists/model/spacy_sapbert_model/model holds: weights in fp16 (sharded into files of
at most 15 MB; with --base, only those training changed), the tokenizer, the settings
(sapbert.json: the pooling, teacher, sparse-weight and other records, the training record) and
MODEL_CARD.md with the data, steps, hardware, wall time, dev figures and licences. A model trained against frozen keys answers to
the keys' model, whose index serves it; any other model's fp16 weights have their own
fingerprint, so build its index with the packaged model, not with the fp32 one.
"""
import json
import logging
import shutil
from pathlib import Path
from typing import List, Optional

import torch
import typer
from spacy_sapbert.assets import BASE
from spacy_sapbert.encoders.models import local_base_model_path, resolve_model
from spacy_sapbert.encoders.base import MODEL_RECORDS
from spacy_sapbert.encoders.settings import read_settings, write_settings
from spacy_sapbert.encoders.transformer import load_transformer, tensors_sha256

from .loop import RUN_SECTION

logger = logging.getLogger(__name__)
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

LICENCES = """\
- Base encoder all-MiniLM-L6-v2 (sentence-transformers): Apache-2.0.
- MeSH: courtesy of the U.S. National Library of Medicine (NLM terms and conditions).
- MONDO, DOID, HPO, ChEBI: CC BY 4.0 (HPO under its own licence: hpo.jax.org/license); EFO: Apache-2.0.
- Fine-tuning corpora (NCBI-disease, BC5CDR, CADEC): research licences of their authors; the
  model holds weights trained on them, no corpus text.
"""


def _data_lines(record: dict) -> List[str]:
    if "texts" in record:
        teacher = record.get("teacher") or {}
        layers = record.get("config", {}).get("model", {}).get("layers") or []
        shares = record.get("texts_per_batch", {})
        return [
            f"A {len(layers) or '?'}-layer student (layers {', '.join(map(str, layers))} of the model it started from) "
            "trained to give that model's mention vectors (the mean cosine distance to them) at a fraction of "
            f"its cost. It answers to `{teacher.get('teacher', '?')}`'s fingerprint "
            f"({teacher.get('fingerprint', '?')}), so indexes built by that model serve it as they are.", "",
            f"- Teacher: `{record.get('base_model', '?')}`",
            *(f"- Texts, {source}: {n:,} distinct, {shares.get(source, '?')} a batch"
              for source, n in record.get("n_texts", {}).items()),
        ]
    if "keys" not in record:
        return [
            "A biomedical name encoder trained with SapBERT's self-alignment objective "
            "(Multi-Similarity loss over hard triplets mined online) for `sapbert_linker`.", "",
            f"- Base model: `{record.get('base_model', '?')}`",
            f"- Pairs: {record.get('n_pairs', '?')} synonym pairs of {record.get('n_concepts', '?')} concepts "
            f"(`{Path(str(record.get('pairs', '?'))).name}`, sha256 {str(record.get('pairs_sha256', '?'))[:12]}…)",
        ]
    objective = record.get("config", {}).get("objective", {})
    # Records written before [objective] had parts keep tau and identity_weight at its top.
    marginal = {**objective, **objective.get("marginal", {})}
    teacher = record.get("teacher") or {}
    lines = [
        "A biomedical mention encoder for `sapbert_linker`, trained on the query side only with BioSyn's "
        "synonym-marginal likelihood over frozen keys (the dictionary names as "
        f"`{teacher.get('teacher', '?')}` embeds them; τ = {marginal.get('tau', '?')}, identity weight "
        f"{marginal.get('identity_weight', '?')}). It answers to that model's fingerprint "
        f"({teacher.get('fingerprint', '?')}), so indexes built by it serve this model as they are.", "",
        f"- Started from: `{record.get('base_model', '?')}`",
    ]
    for keys in record.get("key_sets", []):
        lines.append(f"- Key set {keys.get('source', '?')}: {keys.get('n_queries', '?'):,} queries against "
                     f"{keys.get('n_names', '?'):,} names of {keys.get('n_concepts', '?'):,} concepts")
    return lines


def _stage_lines(record: dict) -> List[str]:
    return [
        *_data_lines(record),
        f"- Steps: {record.get('steps', '?')} of {record.get('names_per_step', '?')} texts",
        f"- Hardware: {record.get('hardware', '?')}; wall time {record.get('wall_seconds', '?')} s; torch {record.get('torch', '?')}",
        f"- Config: `{json.dumps(record.get('config', {}), sort_keys=True)}`",
    ]


def _loading_lines(base: dict) -> List[str]:
    """How a package that leaves out its base's tensors loads (the "base" setting)."""
    names = ", ".join(f"`{name}`" for name in base.get("from_base", []))
    model = base.get("base", "?")
    shown = f"`{model}` (all-MiniLM-L6-v2)" if model == BASE else f"`{model}`"
    return [
        "## Loading", "",
        f"These files leave out the tensors {shown} gives unchanged ({names}). spacy-sapbert "
        "loads the folder whole, taking them from that model and checking them against their recorded sha256 "
        "(the `base` section of `sapbert.json`); `transformers.AutoModel` on this folder alone would fill them "
        "at random.", "",
    ]


def model_card(record: dict, metrics_summary: Optional[str], base: Optional[dict] = None) -> str:
    """MODEL_CARD.md from a run's training record (and the records of the runs it started
    from) and an evaluation summary; `base`: the package's "base" setting, when it leaves out
    the tensors a base model gives."""
    stages = [record]
    while "started_from" in stages[-1]:
        stages.append(stages[-1]["started_from"])
    lines = ["# spacy-sapbert model", "", "## Training", ""]
    for number, stage in enumerate(reversed(stages), start=1):
        if len(stages) > 1:
            lines += [f"### Stage {number} of {len(stages)}", ""]
        lines += _stage_lines(stage) + [""]
    objective = record.get("config", {}).get("objective", {})
    ranking = ([f"The pipe and these figures rank concepts by their synonym-marginal score at the training "
                f"τ = {objective['marginal']['tau']} (the `marginal` section of `sapbert.json`; pipe key `marginal_tau`).", ""]
               if objective.get("loss") == "synonym_marginal" else [])
    lines += _loading_lines(base) if base else []
    lines += [
        "## Dev figures", "", *ranking,
        metrics_summary.strip() if metrics_summary else "Not evaluated yet: run `spacy project run evaluate-trained`.",
        "", "## Licences", "", LICENCES,
    ]
    # The base resolves to a path inside this machine's site-packages: the card names it instead
    # (where the machine has it).
    card = "\n".join(lines)
    local = local_base_model_path()
    return card.replace(str(local), BASE) if local is not None else card


def package_model(model: Path, output: Path, metrics: Optional[Path] = None, base: str = "") -> Path:
    """Write `model` to `output` in fp16 with tokenizer, settings (pooling, records, training
    record: one sapbert.json, whether `model` has one or the files written before it) and card.

    base: a model ("base", a directory) whose weights the trained one kept unchanged (frozen
    during training, such as the word embeddings): those tensors are left out and taken from
    it when the model loads (the "base" setting records which, with their sha256)."""
    if not (model / "config.json").exists():
        raise FileNotFoundError(f"{model} has no config.json; point --model at a trained model directory.")
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    tokenizer, weights = load_transformer(model)
    state = weights.state_dict()
    kept = ("pooling", RUN_SECTION, "teacher", *MODEL_RECORDS)
    settings = {name: section for name, section in read_settings(model).items() if name in kept}
    if base:
        _, base_weights = load_transformer(resolve_model(base))
        same = {name: tensor for name, tensor in base_weights.state_dict().items()
                if name in state and state[name].shape == tensor.shape and torch.equal(state[name], tensor)}
        state = {name: tensor for name, tensor in state.items() if name not in same}
        settings["base"] = {"base": base, "from_base": sorted(same), "sha256": tensors_sha256(same)}
        logger.info("Left out %d tensors the base %s gives unchanged.", len(same), base)
    weights.save_pretrained(output, state_dict={n: t.half() for n, t in state.items()}, max_shard_size="15MB")
    tokenizer.save_pretrained(output)
    if settings:
        write_settings(output, **settings)
    record = settings.get(RUN_SECTION, {})
    summary = None
    if metrics is not None and (metrics / "summary.md").exists():
        summary = (metrics / "summary.md").read_text().replace("# Evaluation summary", "").strip()
        # Its sections sit under the card's "## Dev figures".
        summary = "\n".join("#" + line if line.startswith("## ") else line for line in summary.splitlines())
    (output / "MODEL_CARD.md").write_text(model_card(record, summary, settings.get("base")))
    size = sum(p.stat().st_size for p in output.iterdir()) / 1e6
    logger.info("Packaged %s into %s (%.1f MB).", model, output, size)
    return output


@app.command()
def main(
    model: Path = typer.Option(..., "--model", help="Trained model directory (runs/finetune/model)."),
    output: Path = typer.Option(..., "--output", help="Folder to write the packaged model to."),
    metrics: Optional[Path] = typer.Option(None, "--metrics", help="Folder with the model's evaluation summary.md."),
    base: str = typer.Option("", "--base", help="Leave out the tensors this model (base, or a directory) gives unchanged."),
) -> None:
    """Write a trained model in fp16 with a model card."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = package_model(model, output, metrics, base)
    except FileNotFoundError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)
    typer.echo(f"Packaged model written to {path}")


if __name__ == "__main__":
    app()
