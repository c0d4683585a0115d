"""Pretraining on a lent GPU machine: pack what a run needs here, train there in timed slices,
bring the model back.

A lent machine has torch and transformers but not spaCy, FAISS or our other wheels; only the
working tree travels (64 MiB in all, tracked files included); each call runs at most 10 minutes
and returns at most 8 files of 16 MiB. So:

    python -m training.device.kit prepare --output .device      # here: base weights in fp16,
                                                                # pairs, dev packs, wheels;
                                                                # checks the size
    scripts/device-pretrain.sh …                                # there, once per call (see its header)
    python -m training.device.kit unpack DIR --output runs/gpu  # here: join the returned model parts

`.device/` is ignored by git, so it travels only when a call names it in `carry`.
"""
import gzip
import importlib.metadata
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import typer

from ..datasets import DEFAULT_DATA_DIR
from .devpack import DEFAULT_DATASETS

app = typer.Typer(add_completion=False, help="Pack, export and unpack runs for a lent GPU machine.")

# What training imports that the machine lacks (it has torch, transformers, numpy, tqdm, typer,
# scikit-learn), each at the version installed here; all three are pure Python.
DEVICE_WHEELS = ("pytorch-metric-learning", "confection", "wasabi")
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                   "manylinux2014_x86_64", "manylinux1_x86_64")
TRAVEL_LIMIT = 64 * 2 ** 20
PART_BYTES = 15 * 10 ** 6
PART_GLOB = "{name}.model.tar.*"


def pinned(names: Iterable[str]) -> List[str]:
    """`name==version` for each package as installed here."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


def download_wheels(dest: Path, requirements: List[str], python_version: str = "3.12") -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "--dest", str(dest)]
    for platform in WHEEL_PLATFORMS:
        cmd += ["--platform", platform]
    result = subprocess.run(cmd + requirements, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip could not fetch the device wheels ({result.stderr.strip().splitlines()[-1:]}).")


def recompress(source: Path, dest: Path) -> None:
    """Copy a (gzipped) text file as xz: the open-ontology pairs take 7.6 MB instead of 10.7."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as src, lzma.open(dest, "wb", preset=9) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def travelling_bytes(repo: Path) -> Dict[str, int]:
    """What a device call sends without `carry`: tracked files and untracked files git does not
    ignore, in bytes, by top-level folder."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=repo, capture_output=True, check=True).stdout.decode().split("\0")
    sizes: Dict[str, int] = {}
    for name in filter(None, listed):
        path = repo / name
        if path.is_file():
            top = name.split("/")[0] if "/" in name else "."
            if name.startswith("spacy_sapbert/assets/"):
                top = "spacy_sapbert/assets"
            sizes[top] = sizes.get(top, 0) + path.stat().st_size
    return sizes


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write_base(model: str, output: Path) -> Path:
    """The base encoder in fp16 (half the bytes; the loop trains it in fp32) with its pooling."""
    from spacy_sapbert.assets import resolve_model
    from spacy_sapbert.encoding import POOLING_FILE, detect_pooling

    from ..package import package_model

    source = Path(resolve_model(model))
    package_model(source, output)
    (output / "MODEL_CARD.md").unlink(missing_ok=True)  # a card is for trained models
    from spacy_sapbert.encoding import TEACHER_FILE

    (output / TEACHER_FILE).unlink(missing_ok=True)  # the kit's base is a space of its own: it answers to itself
    (output / POOLING_FILE).write_text(json.dumps({"pooling": detect_pooling(source)}) + "\n")
    return output


def copy_keyset_names(source: Path, dest: Path) -> None:
    """A key set without its vectors (names, queries, meta): what travels to the device."""
    from ..keys import KEYS_FILE

    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(KEYS_FILE))


@app.command("prepare")
def prepare_command(
    output: Path = typer.Option(Path(".device"), help="Kit folder (ignored by git; name it in carry)"),
    pairs: str = typer.Option("corpus/pretrain_pairs.txt.gz", help="Pairs file (`spacy project run ontology pairs`); '' for none"),
    keys: str = typer.Option("", help="Comma-separated key-set folders (python -m training.keys), sent without their vectors: "
                             "the device embeds them again (scripts/device-finetune.sh)"),
    packs: Optional[Path] = typer.Option(None, help="Dev packs folder (`python -m training.device.devpack write`); default: write them"),
    datasets: str = typer.Option(DEFAULT_DATASETS, help="Benchmarks of the dev packs written (cadec too: its fold 0)"),
    model: str = typer.Option("base", help="Model training starts from: 'base' (all-MiniLM-L6-v2), 'default' or a directory"),
) -> None:
    """Put base weights (fp16), pairs or key sets, dev packs and wheels in OUTPUT and check what travels."""
    folders = [Path(k.strip()) for k in keys.split(",") if k.strip()]
    from ..keys import NAMES_FILE

    absent = [str(p) for p in ([Path(pairs)] if pairs else []) + [f / NAMES_FILE for f in folders] if not p.exists()]
    if absent:
        typer.echo(f"error: {absent[0]} does not exist; build it with `spacy project run ontology pairs` "
                   "(pairs) or `python -m training.keys` (key sets).", err=True)
        raise typer.Exit(1)
    output.mkdir(parents=True, exist_ok=True)
    write_base(model, output / "base")
    if pairs:
        recompress(Path(pairs), output / "pairs.txt.xz")
    for folder in folders:
        copy_keyset_names(folder, output / "keys" / folder.name)
    if packs is None:
        from .devpack import write_command

        write_command(output=output / "dev", datasets=datasets,
                      split="dev", protocol="standard", data_dir=DEFAULT_DATA_DIR)
    elif packs.resolve() != (output / "dev").resolve():
        shutil.copytree(packs, output / "dev", dirs_exist_ok=True)
    download_wheels(output / "whl", pinned(DEVICE_WHEELS))
    repo = Path(__file__).resolve().parents[2]
    sizes = travelling_bytes(repo)
    kit = folder_bytes(output)
    total = sum(sizes.values()) + kit
    for part, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]:
        typer.echo(f"  {part:<24} {size / 2 ** 20:6.1f} MiB")
    typer.echo(f"  {output.name + '/ (carry)':<24} {kit / 2 ** 20:6.1f} MiB")
    typer.echo(f"A device call would send {total / 2 ** 20:.1f} MiB (limit 64).")
    if total > TRAVEL_LIMIT:
        assets = sizes.get("spacy_sapbert/assets", 0)
        hint = " `make device-hide-assets` keeps the bundled assets home until `make device-restore-assets`." if assets else ""
        typer.echo(f"error: that is over the device tool's 64 MiB.{hint}", err=True)
        raise typer.Exit(1)


def run_model(run: Path) -> Path:
    """The run's final model, else its latest checkpoint's."""
    from ..checkpoint import latest_checkpoint

    if (run / "model" / "config.json").exists():
        return run / "model"
    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        raise FileNotFoundError(f"{run} has neither a final model nor a checkpoint yet.")
    return checkpoint / "model"


@app.command("export")
def export_command(
    run: Path = typer.Argument(..., help="Run directory on the device"),
    out: Path = typer.Argument(..., help="The call's $OUT"),
    name: str = typer.Option("pretrain", help="Prefix of the files written"),
    packs: Optional[Path] = typer.Option(None, help="Dev packs to score the model on first (NAME.dev.json)"),
    model: bool = typer.Option(True, help="Also return the model (fp16, tar parts of 15 MB)"),
    names_model: str = typer.Option("", help="Model that embeds the packs' dictionaries (a query-side run's keys model)"),
    base: str = typer.Option("", help="Leave out the tensors this model gives unchanged (frozen ones): fewer parts"),
) -> None:
    """On the device: score the run's latest model on the dev packs, and copy its metrics and
    (fp16) model into $OUT, in parts of ≤ 15 MB."""
    from ..package import package_model

    try:
        latest = run_model(run)
    except FileNotFoundError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)
    out.mkdir(parents=True, exist_ok=True)
    if packs is not None:
        from .devpack import score_command

        score_command(packs, model=str(latest), device="auto", batch_size=1024, output=out / f"{name}.dev.json",
                      names_model=names_model, rules=True)
    if (run / "metrics.jsonl").exists():
        shutil.copy(run / "metrics.jsonl", out / f"{name}.metrics.jsonl")
    if not model:
        return
    packaged = package_model(latest, out / f".{name}-fp16", base=base)
    tar_path = out / f".{name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(packaged, arcname="model")
    with tar_path.open("rb") as handle:
        for i, block in enumerate(iter(lambda: handle.read(PART_BYTES), b"")):
            (out / f"{name}.model.tar.{i:02d}").write_bytes(block)
    tar_path.unlink()
    shutil.rmtree(packaged)


def rebind(model: Path, base: str) -> None:
    """Point a model trained from the kit's base (the base in fp16) at the base itself: the
    tensors it left to the kit's base (frozen in training) come from `base`, with their sha256,
    and a query-side model answers to `base`'s fingerprint. The frozen tensors then differ from
    the trained-with ones by fp16 rounding alone, as the keys the device embedded do."""
    from spacy_sapbert.assets import resolve_model
    from spacy_sapbert.encoder import BASE_FILE, TorchEncoder, tensors_sha256
    from spacy_sapbert.encoding import TEACHER_FILE

    record_file = model / BASE_FILE
    if not record_file.exists() and not (model / TEACHER_FILE).exists():
        return  # a model that neither takes tensors from its base nor answers to it
    encoder = TorchEncoder(resolve_model(base), device="cpu")  # once: fp32 weights and the fingerprint
    if record_file.exists():
        record = json.loads(record_file.read_text())
        state = encoder.model.state_dict()
        record.update(base=base, sha256=tensors_sha256({n: state[n] for n in record["from_base"]}))
        record_file.write_text(json.dumps(record, indent=2) + "\n")
    if (model / TEACHER_FILE).exists():
        teacher = {"teacher": base, "fingerprint": encoder.fingerprint}
        (model / TEACHER_FILE).write_text(json.dumps(teacher, indent=2) + "\n")


@app.command("unpack")
def unpack_command(
    folder: Path = typer.Argument(..., help="Where a call's files landed"),
    output: Path = typer.Option(..., help="Run folder to create; the model lands in OUTPUT/model"),
    name: str = typer.Option("pretrain", help="Prefix given to export"),
    base: str = typer.Option("", help="The model whose fp16 image the kit's base was ('base'): the unpacked model then "
                             "takes its frozen tensors from it, and answers to it where it answered to the kit's base"),
) -> None:
    """Here: join the model parts a call returned and unpack them."""
    parts = sorted(folder.glob(PART_GLOB.format(name=name)))
    if not parts:
        typer.echo(f"error: {folder} holds no {PART_GLOB.format(name=name)} files.", err=True)
        raise typer.Exit(1)
    output.mkdir(parents=True, exist_ok=True)
    joined = output / "model.tar"
    with joined.open("wb") as handle:
        for part in parts:
            handle.write(part.read_bytes())
    with tarfile.open(joined) as tar:
        tar.extractall(output, filter="data")
    joined.unlink()
    for extra in folder.glob(f"{name}.*"):
        if extra not in parts:
            shutil.copy(extra, output / extra.name)
    if base:
        rebind(output / "model", base)
    typer.echo(f"Model in {output / 'model'}")


if __name__ == "__main__":
    app()
