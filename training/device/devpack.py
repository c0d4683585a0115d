"""Dev packs: a benchmark's queries and dictionary, prepared once where spaCy resolves the
abbreviations, then scored wherever torch runs. A lent GPU machine has neither spaCy nor FAISS,
so this is how a pretraining run is judged on dev between its timed slices there.

    python -m training.device.devpack write --output .device/dev        # here: NCBI, BC5CDR-d, BC5CDR-c
    python -m training.device.devpack score .device/dev --model runs/pretrain/model --output dev.json

A pack's Acc@k is what `spacy-sapbert evaluate --system model` reports for that dataset and
protocol: the same queries and dictionary, searched exactly (fp32 on CPU, fp16 on a GPU). Packs
hold corpus mentions, so they belong in an ignored folder such as `.device/`, never in the
repository. Nothing here but `write` imports spaCy.
"""
import json
import lzma
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import typer

from spacy_sapbert.ranking import best_concepts

from ..datasets import DEFAULT_DATA_DIR
from ..scoring import MAX_K, accuracy_at_k

PACK_SUFFIX = ".pack.json.xz"  # xz: the chemical pack is 3.5 MB, 5.8 MB as gzip
DEFAULT_DATASETS = "ncbi-disease,bc5cdr-disease,bc5cdr-chemical"

app = typer.Typer(add_completion=False, help="Write dev packs here; score a model on them anywhere torch runs.")


def pack_task(task, dataset: str, split: str, protocol: str) -> dict:
    """A JSON-ready pack of an evaluation Task: the dictionary's names with their concepts, and
    each query's parts with its gold ids resolved as the harness resolves them."""
    names, cuis = task.dictionary.name_rows()
    concepts = list(task.dictionary.cui_to_entity)
    position = {cui: i for i, cui in enumerate(concepts)}
    resolve = task.dictionary.resolve_id
    return {
        "dataset": dataset, "split": split, "protocol": protocol,
        "concepts": concepts, "names": list(names), "name_concept": [position[c] for c in cuis],
        "queries": [q.parts for q in task.queries],
        "gold": [sorted({resolve(g) or g for g in q.gold}) for q in task.queries],
        "n_unlinkable_excluded": task.n_unlinkable,
    }


def write_pack(pack: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pack['dataset']}.{pack['split']}.{pack['protocol']}{PACK_SUFFIX}"
    with lzma.open(path, "wt", encoding="utf-8", preset=9) as handle:
        json.dump(pack, handle, ensure_ascii=False)
    return path


def read_pack(path: Path) -> dict:
    try:
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            pack = json.load(handle)
    except (OSError, ValueError, lzma.LZMAError, EOFError) as err:
        raise ValueError(f"{path} is not a dev pack ({err}); write it again with `python -m training.device.devpack write`.") from None
    missing = {"concepts", "names", "name_concept", "queries", "gold"} - set(pack)
    if missing:
        raise ValueError(f"{path} is not a dev pack: it lacks {', '.join(sorted(missing))}.")
    return pack


def rank_exact(query_vectors: np.ndarray, name_vectors: np.ndarray, name_concept: np.ndarray,
               concepts: Sequence[str], k: int = MAX_K, device: str = "cpu", chunk: int = 1024,
               rescore=None, min_rows: int = 32, tau: float = 0.0,
               exact: Optional[tuple] = None) -> List[List[str]]:
    """Each query's k best distinct concepts from an exact search of the names (unit vectors), as
    ConceptIndex.search ranks them: max(4k, min_rows) names fetched, widened while a row has fewer
    than k concepts, `rescore(positions, rows, cosines)` applied (the hybrid score), concepts by
    best name or, with tau, by synonym-marginal score, and with exact = (query keys, name keys)
    (kb.name_hash) the concepts bearing the query's own name first (ranking.best_concepts)."""
    import torch

    names = torch.from_numpy(name_vectors).to(device)
    fetch = min(len(names), max(4 * k, min_rows))
    ranked: List[List[str]] = []
    for start in range(0, len(query_vectors), chunk):
        queries = torch.from_numpy(query_vectors[start:start + chunk]).to(device=device, dtype=names.dtype)
        positions = np.arange(start, start + len(queries))
        scores = queries @ names.T
        width = fetch
        while True:
            top = scores.topk(width, dim=1)
            values, indices = top.values.float().cpu().numpy(), top.indices.cpu().numpy()
            if rescore is not None:
                values = rescore(positions, indices, values)
            own = (exact[1][indices] == exact[0][positions][:, None]) if exact is not None else [None] * len(indices)
            rows = [[c for c, _ in best_concepts(vals, ids, name_concept, k, tau, mine)]
                    for vals, ids, mine in zip(values, indices, own)]
            if width == len(names) or all(len(r) == k for r in rows):
                break
            width = min(len(names), width * 4)
        ranked.extend([[concepts[c] for c in row] for row in rows])
    return ranked


def score_pack(pack: dict, encoder, device: str = "cpu", names_encoder=None, rules: bool = True) -> dict:
    """Acc@1 … Acc@MAX_K of `encoder` on a pack: the harness's numbers for its dataset, with the
    rules the harness applies (rules=False: the nearest names alone, SapBERT's protocol). The
    rules are the pipe's defaults: the concepts of a query's own name first, the hybrid score at
    the sparse weight the model records and the synonym-marginal ranking at its tau; a
    query-side model needs them most, since its mentions no longer sit on their exact names
    (the default recipe run on a GPU, NCBI dev: 84.4 without, 91.4 with, 91.23 in the harness at int8).
    names_encoder: the model that embeds the dictionary, where it is not `encoder` (a query-side
    model answers to the frozen keys' model, as the bundled index serves the default)."""
    from spacy_sapbert.encoding import recorded_marginal_tau, recorded_sparse_weight
    from spacy_sapbert.kb import name_hash

    start = time.perf_counter()
    name_vectors = (names_encoder or encoder).encode(pack["names"])
    texts = sorted({part for parts in pack["queries"] for part in parts})
    settings: dict = {}
    if rules:
        model = getattr(encoder, "name_or_path", "")
        weight = recorded_sparse_weight(model) if model else 0.0
        if weight > 0:
            from spacy_sapbert.sparse import HYBRID_ROWS, HybridRescorer

            settings.update(rescore=HybridRescorer(pack["names"], weight).for_texts(texts), min_rows=HYBRID_ROWS)
        settings.update(tau=recorded_marginal_tau(model) if model else 0.0, exact=(
            np.array([name_hash(t) for t in texts], dtype=np.uint64),
            np.array([name_hash(n) for n in pack["names"]], dtype=np.uint64)))
    ranked = dict(zip(texts, rank_exact(encoder.encode(texts), name_vectors, np.asarray(pack["name_concept"]),
                                       pack["concepts"], device=device, **settings)))
    accuracy = accuracy_at_k([[ranked[p] for p in parts] for parts in pack["queries"]],
                             [set(g) for g in pack["gold"]])
    return {
        "dataset": pack["dataset"], "split": pack["split"], "protocol": pack["protocol"],
        "n": len(pack["queries"]), "acc@1": accuracy[0], "acc@5": accuracy[4], "acc@k": accuracy,
        "rules": rules, "seconds": round(time.perf_counter() - start, 1),
    }


@app.command("write")
def write_command(
    output: Path = typer.Option(..., help="Folder for the packs (keep it out of git: they hold corpus text)"),
    datasets: str = typer.Option(DEFAULT_DATASETS, help="Comma-separated PubTator benchmarks"),
    split: str = typer.Option("dev", help="dev, or test where you have the test files"),
    protocol: str = typer.Option("standard", help="standard or lenient"),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, help="Folder laid out as ../shared/data"),
) -> None:
    """Prepare each benchmark's queries and dictionary as the harness does, and write them."""
    from ..evaluate import prepare

    for dataset in [d.strip() for d in datasets.split(",") if d.strip()]:
        task = prepare(dataset, split, protocol, data_dir)
        path = write_pack(pack_task(task, dataset, split, protocol), output)
        typer.echo(f"{path}: {len(task.queries)} queries, {task.dictionary.n_names} names ({path.stat().st_size / 1e6:.1f} MB)")


@app.command("score")
def score_command(
    packs: Path = typer.Argument(..., help="A pack file or a folder of them"),
    model: str = typer.Option(..., help="Model directory to score"),
    device: str = typer.Option("auto", help="cpu, cuda or auto"),
    batch_size: int = typer.Option(1024, help="Names per encoder batch"),
    output: Optional[Path] = typer.Option(None, help="Write the results as JSON here"),
    names_model: str = typer.Option("", help="Model that embeds the dictionaries (default: --model); "
                                    "a query-side model's keys model"),
    rules: bool = typer.Option(True, help="The harness's rules (own name first, hybrid, marginal ranking); "
                               "--no-rules: nearest names alone"),
) -> None:
    """Score a model on dev packs: Acc@1 and Acc@5 per pack, as the harness computes them."""
    from spacy_sapbert.encoder import TorchEncoder, resolve_device

    files = sorted(packs.glob(f"*{PACK_SUFFIX}")) if packs.is_dir() else [packs]
    if not files:
        typer.echo(f"error: no *{PACK_SUFFIX} files in {packs}; write them with `python -m training.device.devpack write`.", err=True)
        raise typer.Exit(1)
    from spacy_sapbert.assets import resolve_model

    encoder = TorchEncoder(resolve_model(model), device=device, batch_size=batch_size)
    names_encoder = TorchEncoder(resolve_model(names_model), device=device, batch_size=batch_size) if names_model else None
    results: List[Dict] = []
    for path in files:
        try:
            pack = read_pack(path)
        except ValueError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(1)
        result = score_pack(pack, encoder, device=str(resolve_device(device)), names_encoder=names_encoder,
                            rules=rules)
        results.append(result)
        typer.echo(f"{result['dataset']:<16} {result['protocol']:<8} n={result['n']:<5} "
                   f"Acc@1 {100 * result['acc@1']:.1f}  Acc@5 {100 * result['acc@5']:.1f}  ({result['seconds']} s)")
    if output is not None:
        output.write_text(json.dumps({"model": model, "names_model": names_model or model, "results": results},
                                     indent=2) + "\n")


if __name__ == "__main__":
    app()
