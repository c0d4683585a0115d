"""Corpus-scale linking: sharded JSONL (or text) in, one output shard per input chunk out.

Every shard (shards.Shard) is linked by a worker that loaded the pipeline once and is recorded
with checksums when complete, so a rerun skips every shard whose record still matches: a killed
job resumes where it stopped and no document is lost or written twice. Engines: "local" (this
process) and "ray" (an actor pool on a local or existing Ray cluster; corpus_ray)."""
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .shards import (
    OUTPUT_FORMATS,
    RECORDS,
    CorpusError,
    LinkSettings,
    Shard,
    ShardLinker,
    ShardResult,
    input_files,
    parquet_modules,
    plan_shards,
    shard_is_complete,
)

SETTINGS_FILE = "link-settings.json"


@dataclass
class RunSummary:
    shards: int = 0
    skipped: int = 0
    documents: int = 0
    mentions: int = 0
    seconds: float = 0.0
    results: List[ShardResult] = field(default_factory=list)

    @property
    def mentions_per_s(self) -> float:
        return self.mentions / self.seconds if self.seconds else 0.0

    @property
    def worker_peak_rss_mb(self) -> Dict[int, float]:
        """Each worker process's peak resident memory (MB), as its last shard reported it."""
        peaks: Dict[int, float] = {}
        for result in self.results:
            peaks[result.worker] = max(peaks.get(result.worker, 0.0), result.peak_rss_mb)
        return peaks


def prepare_output(out_dir: Path, settings: LinkSettings) -> None:
    """Create OUT_DIR, or check that the one there was made with these settings: shards linked
    with other settings are never mixed in, nor silently overwritten. Staging files a killed
    run left are removed."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CorpusError(f"--output {out_dir}: is a file; with several inputs --output names a folder.")
    (out_dir / RECORDS).mkdir(parents=True, exist_ok=True)
    for folder in (out_dir, out_dir / RECORDS):
        for stale in folder.glob(".*.part"):
            stale.unlink()
    settings_path = out_dir / SETTINGS_FILE
    wanted = {"digest": settings.digest(), **asdict(settings)}
    if settings_path.exists():
        try:
            found = json.loads(settings_path.read_text(encoding="utf-8"))
        except ValueError:
            found = {}
        if found.get("digest") != wanted["digest"]:
            raise CorpusError(f"--output {out_dir}: holds shards linked with other settings ({settings_path}); "
                              "give a new --output folder, or remove that one to start over.")
        return
    settings_path.write_text(json.dumps(wanted, indent=1), encoding="utf-8")


def pending_shards(out_dir: Path, shards: Sequence[Shard], settings: LinkSettings) -> Tuple[List[Shard], List[Shard]]:
    """(shards still to link, shards complete from an earlier run)."""
    done = [s for s in shards if shard_is_complete(out_dir, s, settings)]
    names = {s.name for s in done}
    return [s for s in shards if s.name not in names], done


def run_local(settings: LinkSettings, out_dir: Path, shards: Sequence[Shard], on_done: Callable[[ShardResult], None],
              threads: int = 0) -> None:
    linker = ShardLinker(settings, str(out_dir), threads)
    for shard in shards:
        on_done(linker.run(shard))


def link_corpus(pattern: str, out_dir: Path, settings: LinkSettings, engine: str = "local",
                workers: Optional[int] = None, address: Optional[str] = None, docs_per_shard: int = 1000,
                progress: bool = True) -> RunSummary:
    """Link every document the `pattern` names into OUT_DIR's shards; skip the complete ones."""
    from filelock import FileLock, Timeout

    if settings.output_format not in OUTPUT_FORMATS:
        raise CorpusError(f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}, not {settings.output_format!r}.")
    files = input_files(pattern)
    inside = [f for f in files if out_dir.resolve() in f.resolve().parents]
    if inside:
        raise CorpusError(f"--input matches {inside[0]}, inside the --output folder {out_dir}; "
                          "write the output elsewhere, or narrow the glob.")
    if settings.output_format == "parquet":
        parquet_modules()
    shards = plan_shards(files, docs_per_shard)
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise CorpusError(f"--output {out_dir}: another link run is writing there; wait for it, "
                          "or give another folder.") from None
    try:
        return _link_shards(shards, out_dir, settings, engine, workers, address, progress)
    finally:
        lock.release()


def _link_shards(shards: Sequence[Shard], out_dir: Path, settings: LinkSettings,
                 engine: str, workers: Optional[int], address: Optional[str], progress: bool) -> RunSummary:
    from tqdm.auto import tqdm

    prepare_output(out_dir, settings)
    todo, done = pending_shards(out_dir, shards, settings)
    summary = RunSummary(shards=len(shards), skipped=len(done))
    bar = tqdm(total=sum(s.n_lines for s in todo), desc="linking", unit="doc", disable=not progress or not todo)
    start = time.perf_counter()

    def on_done(result: ShardResult) -> None:
        summary.results.append(result)
        summary.documents += result.documents
        summary.mentions += result.mentions
        bar.update(result.documents)
        bar.set_postfix(mentions_per_s=f"{summary.mentions / (time.perf_counter() - start):.0f}")

    try:
        if todo and engine == "ray":
            from .ray_engine import run_ray

            run_ray(settings, out_dir, todo, on_done, workers=workers, address=address)
        elif todo:
            run_local(settings, out_dir, todo, on_done)
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - start
    return summary
