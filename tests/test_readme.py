"""The README's Python snippet runs as written (from the README's own text). On a clean cache it
builds the default model's int8 export and the bundled index's graph first (about 35 s on 2 cores)."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_snippet_runs_verbatim(capsys):
    snippet = re.search(r"## Use\n\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    exec(compile(snippet, str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("metformin D008687") for line in printed)
    assert any(line.startswith("lactic acidosis D000140") for line in printed)
