"""The shape the code keeps (issue 20): no import cycle among the package's and the training
code's modules (imports inside functions count too), and no function over 60 lines."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The runtime, and the training package beside it (training/).
FOLDERS = {"spacy_sapbert": ROOT / "spacy_sapbert", "spacy_sapbert_training": ROOT / "training" / "spacy_sapbert_training"}
PACKAGES = tuple(FOLDERS)
MAX_LINES = 60


def _modules():
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder.parent).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(module: str, path: Path, known: set) -> set:
    """The modules of PACKAGES that `module` imports, anywhere in its file."""
    found = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known and name != module)
    return found


def import_graph() -> dict:
    modules = dict(_modules())
    known = set(modules)
    return {module: _imports(module, path, known) for module, path in modules.items()}


def find_cycle(graph: dict):
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
            if nxt not in state:
                cycle = visit(nxt, trail + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [node])
            if cycle:
                return cycle
    return None


# Code copied from another project as it stands there, kept so that it can be compared line for line.
COPIED = {"spacy_sapbert/mentions/schwartz_hearst.py"}


def long_functions():
    for module, path in _modules():
        if str(path.relative_to(ROOT)) in COPIED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)"


def test_no_import_cycle():
    graph = import_graph()
    # package __init__ files import nothing of their own at module level in a way that matters
    cycle = find_cycle({m: {n for n in deps if n not in PACKAGES} for m, deps in graph.items()})
    assert cycle is None, " → ".join(cycle)


def test_no_function_over_60_lines():
    assert list(long_functions()) == []


if __name__ == "__main__":
    graph = import_graph()
    print("cycle:", find_cycle({m: {n for n in deps if n not in PACKAGES} for m, deps in graph.items()}))
    print("\n".join(long_functions()))


# The runtime's layers, top down, as docs/CONTRIBUTING.md draws them: a module imports its own
# layer and the layers below it, never one above (imports inside functions count too).
LAYERS = ("spacy_sapbert", "spacy_sapbert.cli", "spacy_sapbert.corpus", "spacy_sapbert.pipe", "spacy_sapbert.mentions", "spacy_sapbert.candidates",
          "spacy_sapbert.ranking", "spacy_sapbert.search", "spacy_sapbert.encoders", "spacy_sapbert.kb",
          "spacy_sapbert.assets", "spacy_sapbert.cache")


def _layer(module: str) -> int:
    return max(i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def test_no_runtime_import_runs_up_a_layer():
    graph = import_graph()
    up = [f"{module} → {target}" for module, targets in sorted(graph.items()) if module.startswith("spacy_sapbert.")
          for target in sorted(targets) if target.startswith("spacy_sapbert.") and _layer(target) < _layer(module)]
    assert up == []
