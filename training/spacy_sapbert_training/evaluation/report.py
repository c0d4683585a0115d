"""Evaluate a grid of systems × datasets × protocols; write metrics/*.json, a markdown
summary and Acc@k plots (`spacy project run evaluate`)."""
import json
import logging
import re
from pathlib import Path
from typing import List

import typer
from tqdm.auto import tqdm

from ..data.datasets import DEFAULT_DATA_DIR
from ..data.protocol import LINKING_DATASETS
from .evaluate import CONCEPTUAL_DATASETS, RELATEDNESS_DATASETS, run

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
logger = logging.getLogger(__name__)


def _percent(value) -> str:
    return f"{100 * value:.1f}" if value is not None else ""


def _name(metrics: dict) -> str:
    return f"{metrics['dataset']}.{metrics['split']}.{metrics['protocol']}.{metrics['system']}"


def model_key(model: str, precision: str) -> str:
    """What the `model` system's results are filed under: the model as named, its precision and
    a digest of its files, so a changed model is evaluated again instead of reusing its
    predecessor's figures."""
    from spacy_sapbert.encoders.models import resolve_model
    from spacy_sapbert.encoders.export import _directory_digest

    path = Path(resolve_model(model)).expanduser()
    digest = _directory_digest(path)[:8] if path.is_dir() else "hub"
    return f"{re.sub(r'[^A-Za-z0-9]+', '-', model).strip('-')}-{precision}-{digest}"


def write_summary(folder: Path) -> Path:
    """A markdown table of every metrics JSON in `folder`."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    linking = [r for r in rows if "acc@1" in r]
    lines = ["# Evaluation summary", "", "## Linking (Acc@1 / Acc@5, %)", "",
             "| dataset | split | protocol | system | model | n | Acc@1 | Acc@1 of the reachable | Acc@5 | gold reachable | mentions/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(linking, key=lambda r: (r["dataset"], r["protocol"], -r["acc@1"])):
        speed = f"{r['mentions_per_s']:.0f}" if r.get("mentions_per_s") else ""
        model = f"{r['model']} ({r.get('precision', 'fp32')})" if r.get("model") else ""
        lines.append(f"| {r['dataset']} | {r['split']} | {r['protocol']} | {r['system']} | {model} | {r['n']} | "
                     f"{100 * r['acc@1']:.1f} | {_percent(r.get('acc@1_reachable'))} | {100 * r['acc@5']:.1f} | "
                     f"{r['n_gold_reachable']} | {speed} |")
    related = [r for r in rows if "spearman" in r]
    if related:
        lines += ["", "## Relatedness (Spearman ρ)", "", "| dataset | system | model | n | ρ |", "|---|---|---|---|---|"]
        lines += [f"| {r['dataset']} | {r['system']} | {r.get('model') or ''} | {r['n']} | {r['spearman']:.3f} |"
                  for r in related]
    lines += _vector_space_lines(rows)
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _vector_space_lines(rows: List[dict]) -> List[str]:
    """One row per model: MCSM per type group, synonym-pair F1, relatedness ρ."""
    by_model: dict = {}
    for r in rows:
        if r.get("system") == "model" and ("spearman" in r or "pair_f1" in r or "mcsm_C" in r):
            by_model.setdefault(r.get("model") or "", {}).update(
                {k: v for k, v in r.items() if k.startswith("mcsm_") or k == "pair_f1"})
            if "spearman" in r:
                by_model[r.get("model") or ""][r["dataset"]] = r["spearman"]
    if not by_model:
        return []
    columns = ["mcsm_C", "mcsm_F03", "mcsm_D", "mcsm_MONDO", "pair_f1", "mayosrs", "umnsrs"]
    lines = ["", "## Vector space (MCSM of 11.09, synonym-pair F1, relatedness ρ)", "",
             "| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for model, values in sorted(by_model.items()):
        lines.append(f"| {model} | " + " | ".join(f"{values[c]:.3f}" if c in values else "" for c in columns) + " |")
    return lines


def plot_vector_space(folder: Path) -> List[Path]:
    """MCSM per type group, synonym-pair F1 and relatedness, one bar group per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    values: dict = {}
    for r in rows:
        if r.get("system") != "model":
            continue
        for key, value in r.items():
            if key.startswith("mcsm_"):
                values.setdefault(key, {})[r.get("model")] = value / r["max"]
            elif key in ("pair_f1", "spearman"):
                values.setdefault(key if key == "pair_f1" else r["dataset"], {})[r.get("model")] = value
    if not values:
        return []
    models = sorted({m for v in values.values() for m in v})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        ax.bar([j + i * width for j in range(len(values))], [v.get(model, 0) for v in values.values()], width, label=model)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(values))], list(values), rotation=30)
    ax.set(ylabel="score (MCSM as a share of its maximum)", title="Vector space")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = folder / "vector_space.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def plot_accuracy_at_k(folder: Path) -> List[Path]:
    """One PNG per dataset × protocol: Acc@k for k = 1..10, one line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    groups = {}
    for r in rows:
        if "acc@k" in r:
            groups.setdefault((r["dataset"], r["split"], r["protocol"]), []).append(r)
    written = []
    for (dataset, split, protocol), results in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for r in sorted(results, key=lambda r: -r["acc@1"]):
            ks = range(1, len(r["acc@k"]) + 1)
            ax.plot(ks, [100 * a for a in r["acc@k"]], marker="o", label=r["system"])
        ax.set(xlabel="k", ylabel="Acc@k (%)", title=f"{dataset} {split}, {protocol}", xticks=list(range(1, 11)))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = folder / f"acc_at_k.{dataset}.{split}.{protocol}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


@app.command()
def main(
    output: Path = typer.Option(Path("metrics"), "--output", help="Folder for metrics JSON, summary and plots."),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir"),
    split: str = typer.Option("dev", "--split"),
    model: str = typer.Option("default", "--model", help="Model for the `model` system."),
    datasets: str = typer.Option(",".join(LINKING_DATASETS + RELATEDNESS_DATASETS + CONCEPTUAL_DATASETS), "--datasets"),
    systems: str = typer.Option("exact,tfidf,model", "--systems", help="Comma-separated; add scispacy (slow index builds)."),
    protocols: str = typer.Option("standard,lenient", "--protocols"),
    precision: str = typer.Option("fp32", "--precision", help="Mention encoding of the `model` system: fp32, or int8 as the pipe links."),
    force: bool = typer.Option(False, "--force", help="Re-run evaluations whose JSON exists."),
):
    """Run the evaluation grid; skip what `output` already holds unless --force."""
    logging.basicConfig(level=logging.WARNING)
    output.mkdir(parents=True, exist_ok=True)
    grid = []
    for dataset in datasets.split(","):
        for system in systems.split(","):
            if dataset in RELATEDNESS_DATASETS + CONCEPTUAL_DATASETS:
                if system == "model" or (system == "tfidf" and dataset in RELATEDNESS_DATASETS):
                    grid.append((dataset, system, "cosine"))
                continue
            grid += [(dataset, system, protocol) for protocol in protocols.split(",")]
    for dataset, system, protocol in tqdm(grid, desc="evaluations"):
        split_name = "fold0-test" if dataset == "cadec" else "kb" if dataset in CONCEPTUAL_DATASETS else split
        suffix = f".{model_key(model, precision if protocol != 'cosine' else 'fp32')}" if system == "model" else ""
        target = output / f"{dataset}.{split_name}.{protocol}.{system}{suffix}.json"
        if target.exists() and not force:
            continue
        metrics = run(dataset, split, system, protocol if protocol != "cosine" else "standard", data_dir, model,
                      precision=precision if system == "model" and protocol != "cosine" else "fp32")
        target.write_text(json.dumps(metrics, indent=2) + "\n")
        shown = {key: metrics[key] for key in ("acc@1", "spearman", "pair_f1", "mcsm_C") if key in metrics}
        tqdm.write(f"{_name(metrics)}: " + ", ".join(f"{key} {value:.3f}" for key, value in shown.items()))
    write_summary(output)
    plot_accuracy_at_k(output)
    plot_vector_space(output)


if __name__ == "__main__":
    app()
