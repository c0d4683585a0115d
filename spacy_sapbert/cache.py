"""The cache folder and what goes in it: staged writes that never leave half a file, a file
lock around builds that two processes may start, and the file records (sizes and sha256) by
which an index, an ONNX export, a cached state or a checkpoint tells a damaged file."""
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Tuple, Union

logger = logging.getLogger(__name__)


class _UnlessConfigured(logging.StreamHandler):
    """stderr, for a process that has configured no logging of its own (no root handler):
    there the records go where the application sends them instead."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


# First use speaks: what is fetched (and how big) or built, and how long it took, one line each on
# stderr by default; an application that configures logging gets the records instead, and
# logging.getLogger("spacy_sapbert.first_use").setLevel("WARNING") quiets it.
first_use = logging.getLogger("spacy_sapbert.first_use")
first_use.setLevel(logging.INFO)
# How a first-use line reads wherever the package shows it itself: here, and the command line's.
FIRST_USE_FORMAT = logging.Formatter("spacy-sapbert: %(message)s")
_handler = _UnlessConfigured()  # sys.stderr as it is when a record comes (pytest swaps it)
_handler.setFormatter(FIRST_USE_FORMAT)
first_use.addHandler(_handler)


class ResourceError(RuntimeError):
    """A default resource could not be found or fetched."""


def cache_dir() -> Path:
    """The cache folder: $SPACY_SAPBERT_CACHE, else the platform's user cache folder as
    platformdirs gives it (~/.cache/spacy-sapbert on Linux, or under $XDG_CACHE_HOME;
    ~/Library/Caches/spacy-sapbert on macOS; %LOCALAPPDATA%\\spacy-sapbert\\Cache on Windows)."""
    given = os.environ.get("SPACY_SAPBERT_CACHE")
    if given:
        path = Path(given)
    else:
        from platformdirs import user_cache_dir

        path = Path(user_cache_dir("spacy-sapbert", appauthor=False))
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"{path} is not writable")
    except OSError as err:
        where = "SPACY_SAPBERT_CACHE" if given else "the default cache folder"
        raise ResourceError(f"{where} ({path}) cannot be used as a cache folder ({err.strerror or err}); point "
                            "SPACY_SAPBERT_CACHE at a writable folder with space.") from None
    return path


def write_to_cache(target: Path, write: Callable[[Path], object]) -> Path:
    """Have `write` fill a fresh staging folder in the cache, then move it to `target` in one
    rename, so an interrupted build never leaves a half-written `target`; return `target`.
    A failed write (disk full, read-only folder) leaves no staging folder and says what to do."""
    try:
        staging = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f".{target.name}-"))
    except OSError as err:
        raise ResourceError(_unwritable(err)) from None
    try:
        write(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise ResourceError(_unwritable(err)) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def replace_file(target: Path, write: Callable[[Path], object]) -> None:
    """Have `write` fill a staging file beside `target` (hidden, ending ".part"), then rename it
    over `target` in one step, so a killed writer never leaves half a file there."""
    staging = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        write(staging)
        os.replace(staging, target)
    finally:
        if staging.exists():
            staging.unlink()


def _unwritable(err: OSError) -> str:
    return (f"Cannot write the cache in {cache_dir()} ({err.strerror or err}); free space there or set "
            "SPACY_SAPBERT_CACHE to a writable folder.")


def cached_build(target: Path, build: Callable[[Path], object], intact: Callable[[Path], bool], what: str,
                 takes: str = "", seconds: float = 0.0, quiet: bool = False) -> Path:
    """`target` in the cache, built by `build` (into a staging folder, see write_to_cache) unless
    `intact(target)`. A file lock makes a second process wait for the first's build and reuse it;
    a damaged or stale `target` is rebuilt with one warning. what: what it is, for the messages
    ("bundled index's search graph"); takes: how long it took on a quiet 2-core machine, said (at
    INFO) before the build ("about 20 s"), which then reports its own time; seconds: that time as a
    number, for a progress bar that runs against it while the build works; quiet: a build of a
    fraction of a second, which first use does not announce (its lines go at DEBUG)."""
    if intact(target):  # a warm start: no lock, and filelock (which imports asyncio) not imported
        return target
    from filelock import FileLock

    try:
        lock = FileLock(str(target.with_name(f".{target.name}.lock")))
        lock.acquire()
    except OSError as err:
        raise ResourceError(_unwritable(err)) from None
    try:
        if intact(target):  # another process built it while this one waited
            return target
        takes = f" ({takes} on 2 quiet CPU cores)" if takes else ""
        say = first_use.debug if quiet else first_use.info
        if target.exists():
            logger.warning("The cached %s in %s is damaged or stale; building it again%s.", what, target, takes)
        else:
            say("Building the %s once%s; it is cached in %s.", what, takes, target)
        start = time.perf_counter()
        with _timed_bar(f"building the {what}", seconds):
            built = write_to_cache(target, build)
        say("Built the %s in %.0f s.", what, time.perf_counter() - start)
        return built
    finally:
        lock.release()


def derived_copy(path: Path, sha256: str, kind: str, version: int, files: Iterable[str],
                 read: Callable[[Path], object], write: Callable[[Path], None], what: str):
    """What `write` derives from the file at `path` (whose checksum is `sha256`) into a staging
    folder, once, kept as `kind-<sha256[:16]>-v<version>` in the cache holding `files`, and what
    `read` gives of that folder, on that load and every later one (a copy whose record does not
    match, or where `read` raises OSError or ValueError, is made again). A build of a fraction of
    a second, so not announced. None where no cache can be written (the caller derives it itself)."""
    files = list(files)
    held: list = []

    def intact(folder: Path) -> bool:
        if not recorded_intact(folder, files):
            return False
        try:
            held[:] = [read(folder)]
        except (OSError, ValueError):
            return False
        return True

    def build(staging: Path) -> None:
        write(staging)
        write_record(staging, files)

    try:
        folder = cache_dir() / f"{kind}-{sha256[:16]}-v{version}"
        cached_build(folder, build, intact, f"{what} of {path.name} in {path.parent}", takes="under a second",
                     quiet=True)
    except ResourceError:
        return None
    return held[0] if held or intact(folder) else None


@contextmanager
def _timed_bar(what: str, seconds: float):
    """A tqdm bar (on stderr, for a terminal only) that fills against an expected duration while
    the body runs: a build done in one library call reports no progress of its own."""
    if seconds <= 0:
        yield
        return
    from tqdm.auto import tqdm

    done, start = threading.Event(), time.perf_counter()
    bar = tqdm(total=round(seconds), desc=what, unit="s", bar_format="{desc}: {bar} {elapsed} (about {total} s)",
               disable=None)

    def tick():
        while not done.wait(0.5):
            bar.n = min(round(time.perf_counter() - start), bar.total - 1)
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.n = bar.total
        bar.close()


def file_sha256(path: Union[str, Path]) -> str:
    """sha256 of a file, read in 1 MB blocks (fingerprints of weights, indexes and pairs)."""
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lines_sha256(lines: Iterable[str]) -> str:
    """sha256 of text lines, each UTF-8 and ended by a newline (a corpus shard's input, a KB's
    names)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def file_records(folder: Path, names: Iterable[str]) -> Dict[str, dict]:
    """{name: {"bytes", "sha256"}} of files in `folder`: what an index's, an export's, a cached
    state's or a checkpoint's record holds, so that damaged_record can tell a damaged file."""
    return {name: {"bytes": (folder / name).stat().st_size, "sha256": file_sha256(folder / name)} for name in names}


# The record a cached folder keeps of its own files (write_record, recorded_intact).
RECORD_FILE = "files.json"


def recorded_sha256(meta: dict, name: str) -> Optional[str]:
    """The sha256 that `meta["files"]` (file_records) records for the file `name`, or None where
    it records none: what a copy derived from that file is keyed by (derived_copy)."""
    files = meta.get("files")
    record = files.get(name) if isinstance(files, dict) else None
    sha256 = record.get("sha256") if isinstance(record, dict) else None
    return sha256 if isinstance(sha256, str) else None


def write_record(folder: Path, names: Iterable[str]) -> None:
    """Record the sizes and checksums of `names` in `folder` (its RECORD_FILE), for recorded_intact."""
    (folder / RECORD_FILE).write_text(json.dumps(file_records(folder, names), indent=2))


def recorded_intact(folder: Path, names: Iterable[str]) -> bool:
    """Whether `folder`'s RECORD_FILE records exactly `names` and every one matches it
    (damaged_record); False where the record is missing or unreadable."""
    try:
        records = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(records, dict) and set(records) == set(names) and damaged_record(folder, records) is None


# Files whose checksum matched, by path: their size, times, inode, device and sha256, kept in the
# cache folder, so that a load does not hash an unchanged index again (0.3 s of a cold start).
VERIFIED_FILE = "verified.json"


def damaged_record(folder: Path, records: Dict[str, dict]) -> Optional[Tuple[Path, str]]:
    """The first file `records` (from file_records) names that is "missing", of another "size"
    or of another "checksum", with which; None when every one matches. A file whose size,
    modification and change times, inode and device are those it had when its checksum last
    matched is not hashed again."""
    verified = _verified()
    added = {}
    for name, expected in records.items():
        file = folder / name
        if not file.exists():
            return file, "missing"
        stat = file.stat()
        if not isinstance(expected, dict) or stat.st_size != expected.get("bytes"):
            return file, "size"
        # The change time too: a copy that sets the modification time back cannot set it back.
        key = str(file.resolve())
        seen = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev, expected.get("sha256")]
        if verified.get(key) == seen:
            continue
        if file_sha256(file) != expected.get("sha256"):
            return file, "checksum"
        if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > 2e9:  # a change within the clock's tick could hide
            added[key] = seen
    if added:
        _remember_verified(added)
    return None


def _verified() -> Dict[str, list]:
    try:
        with open(cache_dir() / VERIFIED_FILE, encoding="utf-8") as handle:
            stored = json.load(handle)
        return stored if isinstance(stored, dict) else {}
    except (OSError, ValueError, ResourceError):
        return {}


def _remember_verified(added: Dict[str, list]) -> None:
    """Add `added` to the record of verified files (best effort: one written in one rename, so a
    reader never sees half of it; an unwritable cache only means hashing again)."""
    try:
        folder = cache_dir()
        stored = {path: seen for path, seen in _verified().items() if os.path.exists(path)}
        stored.update(added)
        handle, staging = tempfile.mkstemp(dir=folder, prefix=f".{VERIFIED_FILE}-")
    except (OSError, ResourceError):
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(stored, out)
        os.replace(staging, folder / VERIFIED_FILE)
    except OSError:
        pass
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
