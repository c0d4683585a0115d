"""project.yml: every command in a workflow, and the training commands run on CPU with the tiny model."""
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import srsly
from weasel.util.config import substitute_project_variables

from spacy_sapbert.encoders.settings import read_settings

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = ("default", "paper", "seeds", "evaluation")  # spaCy forbids a workflow named `evaluate`
CPU_RECIPE = ["keys", "pretrain-cpu", "finetune-cpu", "evaluate-cpu", "package-default", "fast-cpu",
              "linking-kb", "bundle-index", "bundle-chemicals", "names-table", "ner"]


def project_config():
    """project.yml with its vars filled in (weasel's loader would also make its directories)."""
    return substitute_project_variables(srsly.read_yaml(REPO / "project.yml"))


def test_every_command_is_in_a_workflow():
    config = project_config()
    names = [command["name"] for command in config["commands"]]
    assert len(names) == len(set(names)) and "device-kit" not in names
    in_workflows = {name for steps in config["workflows"].values() for name in steps}
    assert set(names) - in_workflows == set()
    assert in_workflows <= set(names)


def test_the_workflows_and_no_names_before_0_2():
    workflows = project_config()["workflows"]
    assert set(WORKFLOWS) <= set(workflows)
    assert workflows["default"] == CPU_RECIPE
    assert workflows["paper"][:6] == ["ontology", "pairs", "pretrain", "finetune", "evaluate-trained", "package"]
    assert workflows["paper"][-1] == "index"
    assert {"kge", "contexts", "pretrain-ms2", "pretrain-ms3", "pretrain-kge-injected", "pretrain-prototypes",
            "pretrain-contextual", "pretrain-adapter13", "pretrain-adapter1"} <= set(workflows["seeds"])
    assert workflows["evaluation"] == ["realistic", "evaluate", "train-folds", "train-folds-pipe", "train-folds-pipe-names"]
    assert "default-cpu" not in workflows and "all" not in workflows  # 0.1's names, gone with 0.1's shims


def test_each_workflow_makes_its_own_inputs():
    """A step's deps are in the checkout or the outputs of an earlier step of the same workflow."""
    config = project_config()
    commands = {command["name"]: command for command in config["commands"]}
    for workflow, steps in config["workflows"].items():
        made = set()
        for step in steps:
            for dep in commands[step].get("deps", []):
                assert dep in made or (REPO / dep).exists(), (workflow, step, dep)
            made.update(commands[step].get("outputs", []))


def test_every_script_module_exists():
    modules = {argv[argv.index("-m") + 1] for command in project_config()["commands"]
               for line in command["script"] for argv in [shlex.split(line)] if "-m" in argv}
    assert "spacy_sapbert_training.trainer.pretrain" in modules
    assert [module for module in sorted(modules) if importlib.util.find_spec(module) is None] == []


def test_default_dry_run_lists_the_cpu_recipe():
    # A run makes the project's directories: leave none behind that was not there.
    folders = [REPO / name for name in project_config()["directories"] if not (REPO / name).exists()]
    try:
        result = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "default", "--dry"],
                                capture_output=True, text=True, cwd=REPO, timeout=300)
    finally:
        for folder in folders:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)  # wasabi colours even into a pipe
    listed = re.findall(r"^=+ (\S+) =+$", out, flags=re.MULTILINE)
    assert listed == CPU_RECIPE
    assert "--output runs/pretrain-cpu " in out and "--output runs/finetune-cpu " in out


def spacy_project(*args, cwd):
    result = subprocess.run([sys.executable, "-m", "spacy", "project", *args],
                            capture_output=True, text=True, cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow  # 105 s: every pretraining command of project.yml, run through spaCy's project CLI
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
    settings = {run: read_settings(folder / "runs" / run / "model") for run, folder in where.items()}
    assert "context" in settings["pretrain-contextual"]  # the window the pipe then encodes mentions in
    for run, folder in where.items():
        weights = "adapter_config.json" if "adapter" in run else "config.json"
        assert (folder / "runs" / run / "model" / weights).exists()
        assert settings[run]["training"]["steps"] == 2
    assert "multi_similarity_v2" in json.dumps(settings["pretrain-ms2"]["training"])


def _write_context_pairs(path: Path, kb_file: Path) -> None:
    """What `spacy project run contexts` writes from the train abstracts, from two sentences."""
    from spacy_sapbert.kb.formats import read_jsonl
    from spacy_sapbert_training.data.contexts import context_nlp, context_pairs, contexts, name_matcher
    from spacy_sapbert_training.data.pairs import write_pairs

    kb, nlp = read_jsonl(kb_file), context_nlp()
    text = ("Patients with type 2 diabetes took metformin daily. Two developed lactic acidosis. "
            "Metformin can cause lactic acidosis in diabetes mellitus.")
    write_pairs(context_pairs(contexts(nlp, name_matcher(nlp, kb), [text]), kb, synonyms=2), path)
