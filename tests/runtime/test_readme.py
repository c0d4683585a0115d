"""The README's Python snippet runs as written (from the README's own text). On a clean cache it
builds the default model's int8 export and the bundled index's graph first (about 35 s on 2 cores).
The README stays a page for users, and no tracked file describes the machines the project was
built on."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 350
# Spelt in pieces so that this file does not match them itself.
BUILD_MACHINE_WORDS = [
    re.compile(rb"lent" + rb"\s+GPU", re.I),
    re.compile(rb"carry\W{0,8}\." + rb"device"),
    re.compile(rb"\$" + rb"OUT\b"),
]


def test_the_readme_snippet_runs_verbatim(capsys):
    snippet = re.search(r"## Use\n\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    exec(compile(snippet, str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    # the flagship sample: the bundled NER tags NIDDM (not its long form), which the abbreviation
    # detector's long form links to type 2 diabetes
    for start in ("NIDDM D003924", "metformin D008687", "lactic acidosis D000140"):
        assert any(line.startswith(start) for line in printed), (start, printed)


def test_the_readme_quick_start_runs_verbatim():
    """The Quick start's command line, as written, with this environment's spacy-sapbert."""
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for line in filter(None, (line.split("  #")[0].strip() for line in block.splitlines())):
        result = subprocess.run(line, shell=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert result.returncode == 0, (line, result.stderr[-2000:])
        assert "D003924" in result.stdout and "D008687" in result.stdout, result.stdout


def test_the_readme_knowledge_base_example_builds_and_links(tmp_path):
    """Its JSONL line as my_kb.jsonl and the same concept as HPO's OBO Graphs JSON (hp.json), its
    build-index commands as written, then the pipe over each index links the concept's alias."""
    import json

    import spacy
    from spacy.tokens import Span

    section = README.read_text(encoding="utf-8").split("## Bring your own knowledge base", 1)[1]
    line = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    command = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    (tmp_path / "my_kb.jsonl").write_text(line + "\n", encoding="utf-8")
    concept = json.loads(line)
    node = {"id": "http://purl.obolibrary.org/obo/" + concept["concept_id"].replace(":", "_"), "lbl": concept["canonical_name"],
            "type": "CLASS", "meta": {"synonyms": [{"pred": "hasExactSynonym", "val": a} for a in concept["aliases"]]}}
    (tmp_path / "hp.json").write_text(json.dumps({"graphs": [{"nodes": [node]}]}), encoding="utf-8")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run("set -e\n" + command, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for index in ("my_index", "hp_index"):
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"index": {"index": str(tmp_path / index)}})
        doc = nlp.make_doc("cephalgia")
        doc.ents = [Span(doc, 0, 1, "Disease")]
        assert nlp(doc).ents[0]._.cui == "HP:0002315", index


def test_the_readme_pipeline_links_alike_in_two_processes():
    """The pipeline the README's snippet builds, as written, gives the same links with
    nlp.pipe(n_process=2) as in one process."""
    snippet = re.search(r"## Use\n\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    building = snippet.split("\ndoc = ", 1)[0]
    namespace = {}
    exec(compile(building, str(README), "exec"), namespace)
    nlp = namespace["nlp"]
    texts = ["Patients with non-insulin-dependent diabetes mellitus (NIDDM) developed lactic acidosis after metformin.",
             "Acute renal failure (ARF) and hypertension were reported after cisplatin.",
             "NIDDM and BPH were common; ARF was not."] * 2
    one = [[(e.text, e._.cui, e._.kb_ents) for e in doc.ents] for doc in nlp.pipe(texts)]
    two = [[(e.text, e._.cui, e._.kb_ents) for e in doc.ents] for doc in nlp.pipe(texts, n_process=2)]
    assert two == one and any(doc for doc in one)


def test_the_readme_is_a_page_for_users():
    n_lines = len(README.read_text(encoding="utf-8").splitlines())
    assert n_lines <= MAX_README_LINES, f"README.md has {n_lines} lines; move measurements and history to docs/."


def _tracked_files():
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name.decode() for name in listed.split(b"\0") if name and not name.startswith(b".git/")]


def test_no_tracked_file_describes_the_build_machines():
    found = []
    for path in _tracked_files():
        if not path.is_file():  # listed but deleted in the working tree
            continue
        data = path.read_bytes()
        found += [f"{path.relative_to(ROOT)}: {pattern.pattern!r}" for pattern in BUILD_MACHINE_WORDS
                  if pattern.search(data)]
    assert not found, found


def test_the_readme_tells_a_scispacy_user_what_differs():
    """"Coming from scispaCy": the factory and key to write, the defaults that differ (as the
    factory has them), that a Concept unpacks as an Entity, and n_process's make_serializable."""
    import dataclasses

    from spacy_sapbert.candidates import CandidateSettings

    section = README.read_text(encoding="utf-8").split("### Coming from scispaCy", 1)[1].split("\n- ", 1)[0]
    defaults = dataclasses.asdict(CandidateSettings())
    assert '"scispacy_linker"' in section and '{"index": {"index": "mesh"}}' in section
    assert (f"`k` {defaults['k']}, `threshold` {defaults['threshold']}, `filter_for_definitions` "
            f"{str(defaults['filter_for_definitions']).lower()}") in section
    assert "cui, name, aliases, types, definition = linker.kb.cui_to_entity[cui]" in section
    assert "make_serializable=True" in section and "n_process=2" in section
