"""Evaluate a grid of systems × datasets × protocols; write metrics/*.json, a markdown
summary and Acc@k plots (`spacy project run evaluate`)."""
import json
import logging
import re
from pathlib import Path
from typing import List

import typer
from tqdm.auto import tqdm

from .evaluate import DEFAULT_DATA_DIR, LINKING_DATASETS, RELATEDNESS_DATASETS, run

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
logger = logging.getLogger(__name__)


def _name(metrics: dict) -> str:
    return f"{metrics['dataset']}.{metrics['split']}.{metrics['protocol']}.{metrics['system']}"


def model_key(model: str, precision: str) -> str:
    """What the `model` system's results are filed under: the model as named, its precision and
    a digest of its files, so a changed model is evaluated again instead of reusing its
    predecessor's figures."""
    from spacy_sapbert.assets import resolve_model
    from spacy_sapbert.onnx_encoder import _directory_digest

    path = Path(resolve_model(model)).expanduser()
    digest = _directory_digest(path)[:8] if path.is_dir() else "hub"
    return f"{re.sub(r'[^A-Za-z0-9]+', '-', model).strip('-')}-{precision}-{digest}"


def write_summary(folder: Path) -> Path:
    """A markdown table of every metrics JSON in `folder`."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    linking = [r for r in rows if "acc@1" in r]
    lines = ["# Evaluation summary", "", "## Linking (Acc@1 / Acc@5, %)", "",
             "| dataset | split | protocol | system | model | n | Acc@1 | Acc@5 | gold reachable | mentions/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(linking, key=lambda r: (r["dataset"], r["protocol"], -r["acc@1"])):
        speed = f"{r['mentions_per_s']:.0f}" if r.get("mentions_per_s") else ""
        model = f"{r['model']} ({r.get('precision', 'fp32')})" if r.get("model") else ""
        lines.append(f"| {r['dataset']} | {r['split']} | {r['protocol']} | {r['system']} | {model} | {r['n']} | "
                     f"{100 * r['acc@1']:.1f} | {100 * r['acc@5']:.1f} | {r['n_gold_reachable']} | {speed} |")
    related = [r for r in rows if "spearman" in r]
    if related:
        lines += ["", "## Relatedness (Spearman ρ)", "", "| dataset | system | model | n | ρ |", "|---|---|---|---|---|"]
        lines += [f"| {r['dataset']} | {r['system']} | {r.get('model') or ''} | {r['n']} | {r['spearman']:.3f} |"
                  for r in related]
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


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
    datasets: str = typer.Option(",".join(LINKING_DATASETS + RELATEDNESS_DATASETS), "--datasets"),
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
            if dataset in RELATEDNESS_DATASETS:
                if system in ("tfidf", "model"):
                    grid.append((dataset, system, "cosine"))
                continue
            grid += [(dataset, system, protocol) for protocol in protocols.split(",")]
    for dataset, system, protocol in tqdm(grid, desc="evaluations"):
        split_name = split if dataset != "cadec" else "fold0-test"
        suffix = f".{model_key(model, precision if protocol != 'cosine' else 'fp32')}" if system == "model" else ""
        target = output / f"{dataset}.{split_name}.{protocol}.{system}{suffix}.json"
        if target.exists() and not force:
            continue
        metrics = run(dataset, split, system, protocol if protocol != "cosine" else "standard", data_dir, model,
                      precision=precision if system == "model" and protocol != "cosine" else "fp32")
        target.write_text(json.dumps(metrics, indent=2) + "\n")
        tqdm.write(f"{_name(metrics)}: " + (
            f"Acc@1 {100 * metrics['acc@1']:.1f}" if "acc@1" in metrics else f"rho {metrics['spearman']:.3f}"))
    write_summary(output)
    plot_accuracy_at_k(output)


if __name__ == "__main__":
    app()
