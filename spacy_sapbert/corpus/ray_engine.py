"""The Ray engine of corpus linking: a pool of actors, each a ShardLinker that loads the
pipeline once, fed whole shards. Imported only for `--engine ray` (pip install ray==2.60.0)."""
import os
from pathlib import Path
from typing import Callable, Optional, Sequence

from .shards import CorpusError, LinkSettings, Shard, ShardLinker, ShardResult


def _ray():
    try:
        import ray
    except ImportError:
        raise CorpusError("--engine ray needs Ray: pip install ray==2.60.0 (or spacy-sapbert[corpus]).") from None
    return ray


def _start(ray, address: Optional[str], workers: Optional[int]) -> bool:
    """Join the cluster at `address`, or start a local one sized for `workers`; whether this
    call started or joined one (and so should let it go at the end)."""
    if ray.is_initialized():
        return False
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=max(workers or 0, os.cpu_count() or 1), **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise CorpusError(f"--address {address}: cannot join that Ray cluster ({err}).") from None
    return True


def run_ray(settings: LinkSettings, out_dir: Path, shards: Sequence[Shard], on_done: Callable[[ShardResult], None],
            workers: Optional[int] = None, address: Optional[str] = None) -> None:
    """Link `shards` on `workers` actors of one CPU each (default: one per CPU of the cluster),
    calling `on_done` as each shard completes (in completion order; outputs are per shard, so
    order does not change them)."""
    ray = _ray()
    started = _start(ray, address, workers)
    from ray.util import ActorPool

    n_workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    n_workers = min(n_workers, len(shards))
    actor = ray.remote(num_cpus=1)(ShardLinker)
    # One ONNX Runtime thread per actor: each actor holds one CPU.
    pool = ActorPool([actor.remote(settings, str(out_dir), 1) for _ in range(n_workers)])
    try:
        for result in pool.map_unordered(lambda worker, shard: worker.run.remote(shard), list(shards)):
            on_done(result)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, (ValueError, OSError)):
            raise CorpusError(str(cause)) from None
        raise
    except ray.exceptions.RayActorError as err:
        raise CorpusError(f"A Ray worker died ({err}); rerun the same command to resume from the shards done.") from None
    finally:
        if started:
            ray.shutdown()
