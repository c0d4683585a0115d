"""The runtime stands alone: the training code is its own package beside it (training/,
`spacy_sapbert_training`), which no runtime module imports, and the runtime's distribution holds no
package but `spacy_sapbert`."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "spacy_sapbert"
TRAINING = ROOT / "training" / "spacy_sapbert_training"


def _imported(path: Path):
    """Absolute names of the modules `path` imports, relative imports resolved."""
    top = TRAINING.parent if TRAINING in path.parents else ROOT
    package = ".".join(path.relative_to(top).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def test_importing_the_runtime_does_not_import_training():
    pytest.importorskip("torch")  # encoders.transformer is imported too
    code = (
        "import sys, spacy_sapbert, spacy_sapbert.cli, spacy_sapbert.pipe.bundled, spacy_sapbert.encoders.transformer; "
        "bad = [m for m in sys.modules if m.startswith(('training', 'spacy_sapbert_training'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_runtime_module_names_training():
    for path in RUNTIME.rglob("*.py"):
        bad = [name for name in _imported(path) if name.split(".")[0] in ("training", "pytorch_metric_learning")
               or name.startswith("spacy_sapbert_training")]
        assert not bad, (path, bad)


def test_no_runtime_module_names_scipy():
    """Linking needs no scipy (install_requires leaves it out; the hybrid score's sparse rows are
    numpy's), so no runtime module may import it, even late."""
    for path in RUNTIME.rglob("*.py"):
        bad = [name for name in _imported(path) if name.split(".")[0] == "scipy"]
        assert not bad, (path, bad)


def test_data_preparation_does_not_import_the_harness():
    for path in (TRAINING / "data").rglob("*.py"):
        bad = [name for name in _imported(path) if name.startswith("spacy_sapbert_training.evaluation")]
        assert not bad, (path, bad)


def test_the_top_level_is_the_runtime_beside_the_training_code():
    """As the design card draws it: spacy_sapbert/ (the runtime, the only package setup.cfg
    builds), training/ (its own package), project.yml, tests/, setup.cfg."""
    import configparser

    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert packages == ["spacy_sapbert"], packages
    assert all((ROOT / name).exists() for name in ("training/pyproject.toml", "project.yml", "tests", "setup.cfg"))
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["options.packages.find"]["include"].split() == ["spacy_sapbert", "spacy_sapbert.*"]
    assert "spacy_sapbert_commands" not in setup["options.entry_points"]


def test_the_tested_floors_are_the_claimed_floors():
    """requirements-floors.txt, which CI installs the runtime against, holds each runtime
    dependency's lower bound as setup.cfg's install_requires writes it, and nothing else."""
    import configparser
    import re

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    claimed = {}
    for line in setup["options"]["install_requires"].splitlines():
        found = re.match(r"([\w.-]+)>=([\w.]+)", line.strip())
        if found:
            claimed[found.group(1).lower()] = found.group(2)
    tested = dict(line.split("==") for line in (ROOT / "requirements-floors.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    pad = lambda version: version + ".0" * (2 - version.count("."))  # noqa: E731 (1.25 and 1.25.0 are one floor)
    assert {name: pad(v) for name, v in tested.items()} == {name: pad(v) for name, v in claimed.items()}
