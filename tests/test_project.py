"""The spaCy project runs its training commands on CPU with the tiny model."""
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def spacy_project(*args, cwd):
    result = subprocess.run([sys.executable, "-m", "spacy", "project", *args],
                            capture_output=True, text=True, cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def test_project_pretrain_runs_on_cpu_with_the_tiny_model(tmp_path, tiny_model, tiny_kb_file):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "project.yml", project)
    shutil.copytree(REPO / "configs", project / "configs")
    overrides = [f"--vars.ontology={tiny_kb_file}", f"--vars.base_model={tiny_model}",
                 "--vars.device=cpu", "--vars.batch_size=8"]
    spacy_project("run", "ontology", ".", *overrides, cwd=project)
    spacy_project("run", "pairs", ".", *overrides, cwd=project)
    # MS loss v3 reads KGE vectors (`spacy project run kge` trains them on the bundled KB's graph)
    import numpy as np

    ids = [line.split('"concept_id": "')[1].split('"')[0] for line in tiny_kb_file.read_text().splitlines() if line]
    np.savez(project / "corpus" / "kge.npz", ids=np.array(ids), vectors=np.random.default_rng(0).normal(size=(len(ids), 6)))
    _write_context_pairs(project / "corpus" / "context_pairs.txt.gz", tiny_kb_file)
    steps = "--vars.max_steps=2"
    commands = {  # each command with its own overrides; they share nothing but the pairs
        "pretrain": [steps], "pretrain-ms2": [steps], "pretrain-ms3": [steps],
        "pretrain-kge-injected": [steps, "--vars.kge_injection_steps=2"],
        "pretrain-prototypes": [steps, "--vars.concepts_per_batch=2", "--vars.negatives_refresh_every=1"],
        "pretrain-adapter13": [steps], "pretrain-adapter1": [steps], "pretrain-contextual": [steps],
    }
    # Two copies of the project run half the commands each, side by side (the suite's two
    # cores; one project's lock file is written by one process at a time).
    twin = tmp_path / "twin"
    shutil.copytree(project, twin)
    halves = {project: list(commands)[::2], twin: list(commands)[1::2]}

    def run_half(folder):
        for name in halves[folder]:
            spacy_project("run", name, ".", *commands[name], *overrides, cwd=folder)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run_half, halves))
    where = {name: folder for folder, names in halves.items() for name in names}
    where["pretrain-kge-aligned"] = where["pretrain-kge-injected"]
    assert (where["pretrain-contextual"] / "runs" / "pretrain-contextual" / "model" / "sapbert_context.json").exists()
    for run, folder in where.items():
        model = folder / "runs" / run / "model"
        weights = "adapter_config.json" if "adapter" in run else "config.json"
        assert (model / weights).exists() and (model / "training.json").exists()
        assert '"steps": 2' in (model / "training.json").read_text()
    assert "multi_similarity_v2" in (where["pretrain-ms2"] / "runs" / "pretrain-ms2" / "model" / "training.json").read_text()


def _write_context_pairs(path: Path, kb_file: Path) -> None:
    """What `spacy project run contexts` writes from the train abstracts, from two sentences."""
    from spacy_sapbert.kb_formats import read_jsonl
    from training.contexts import context_nlp, context_pairs, contexts, name_matcher
    from training.pairs import write_pairs

    kb, nlp = read_jsonl(kb_file), context_nlp()
    text = ("Patients with type 2 diabetes took metformin daily. Two developed lactic acidosis. "
            "Metformin can cause lactic acidosis in diabetes mellitus.")
    write_pairs(context_pairs(contexts(nlp, name_matcher(nlp, kb), [text]), kb, synonyms=2), path)
