"""The runtime package stands alone: it never imports the training code."""
import ast
import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[1] / "spacy_sapbert"


def test_importing_the_runtime_does_not_import_training():
    code = (
        "import sys, spacy_sapbert, spacy_sapbert.cli, spacy_sapbert.demo, spacy_sapbert.encoder; "
        "bad = [m for m in sys.modules if m == 'training' or m.startswith('training.')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_runtime_module_names_training():
    for path in RUNTIME.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] in ("training", "pytorch_metric_learning") for n in names), path
