"""The README's Python snippet runs as written (from the README's own text). On a clean cache it
builds the default model's int8 export and the bundled index's graph first (about 35 s on 2 cores)."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_snippet_runs_verbatim(capsys):
    snippet = re.search(r"## Use\n\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    exec(compile(snippet, str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    # the flagship sample: the NER cuts the long form and tags NIDDM Chemical; follow_long_forms
    # puts both right, so both reach type 2 diabetes
    for start in ("non-insulin-dependent diabetes mellitus D003924", "NIDDM D003924", "metformin D008687",
                  "lactic acidosis D000140"):
        assert any(line.startswith(start) for line in printed), (start, printed)
