#!/usr/bin/env bash
# Builds the wheels (the runtime; the bundled index, a package of its own that it requires; the
# default model's fp32 weights, which the gpu and train extras bring), checks that each is under
# PyPI's 100 MB, and installs the runtime alone (no extras) into a fresh venv, as a user would,
# against the pins of requirements.txt; then runs the README's Python snippet there. It
# must link the sample right with neither torch, transformers, scikit-learn, scipy nor scispaCy imported.
# The venv's size is printed and held under 800 MB (DESIGN.md), which catches torch (700 MB and
# more) or scispaCy's nmslib and scikit-learn (110 MB) coming back.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
python=${PYTHON:-python3.11}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

.venv/bin/pip wheel --quiet --no-deps -w "$work/dist" . dists/index dists/model >/dev/null
wheel=$(ls "$work"/dist/spacy_sapbert-*.whl)
index_wheel=$(ls "$work"/dist/spacy_sapbert_index-*.whl)
model_wheel=$(ls "$work"/dist/spacy_sapbert_model-*.whl)
.venv/bin/python - "$wheel" "$index_wheel" "$model_wheel" <<'PY'
import os, sys, zipfile
for path, top in zip(sys.argv[1:], ("spacy_sapbert", "spacy_sapbert_index", "spacy_sapbert_model")):
    tops = {name.split("/")[0] for name in zipfile.ZipFile(path).namelist() if ".dist-info/" not in name}
    assert tops == {top}, f"{os.path.basename(path)} installs top-level packages {sorted(tops)}"
    size = os.path.getsize(path) / 1e6
    print(f"{os.path.basename(path)}: {size:.1f} MB")
    assert size < 100, f"{os.path.basename(path)} is {size:.1f} MB; PyPI refuses files of 100 MB and more"
PY

"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet -c requirements.txt "$wheel" "$index_wheel"
size=$(du -sm "$work/venv" | cut -f1)
echo "runtime venv: $size MB"
[ "$size" -lt 800 ] || { echo "the runtime venv takes $size MB, over 800 MB"; exit 1; }
"$work/venv/bin/python" -c "import torch" 2>/dev/null && { echo "torch came with the runtime"; exit 1; }

# Outside the checkout, so that the installed package is the one imported; on an empty cache, so
# that first use (the graph set from its links, the tf-idf fitted without scikit-learn) runs too.
cd "$work"
export SPACY_SAPBERT_CACHE="$work/cache"
"$work/venv/bin/python" - "$root/README.md" <<'PY'
import contextlib, io, re, sys
readme = open(sys.argv[1], encoding="utf-8").read()
snippet = re.search(r"## Use\n\n```python\n(.*?)```", readme, re.S).group(1)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    exec(compile(snippet, "README.md", "exec"), {})
printed = out.getvalue().splitlines()
import spacy_sapbert
assert "site-packages" in spacy_sapbert.__file__, spacy_sapbert.__file__
for start in ("NIDDM D003924", "metformin D008687", "lactic acidosis D000140"):
    assert any(line.startswith(start) for line in printed), (start, printed)
loaded = [name for name in ("torch", "transformers", "sklearn", "scipy", "scispacy") if name in sys.modules]
assert not loaded, f"linking imported {loaded}"
print("the README snippet linked the sample from the installed wheel without torch, transformers, scikit-learn, scipy or scispaCy")
PY
# The Quick start's command line, and one sentence naming the extra for what needs torch.
linked=$("$work/venv/bin/spacy-sapbert" link "Patients with non-insulin-dependent diabetes mellitus (NIDDM) took metformin.")
[[ "$linked" == *D003924* ]] || { echo "spacy-sapbert link did not link the sample: $linked"; exit 1; }
"$work/venv/bin/python" -c "
import spacy
nlp = spacy.blank('en')
nlp.add_pipe('sapbert_linker', config={'encoder': {'precision': 'fp32'}})
try:
    nlp.initialize()
except ValueError as err:
    assert 'spacy-sapbert[gpu]' in str(err), err
else:
    raise AssertionError('fp32 was accepted at initialize without torch')
"
# The training package's command says where it lives, in one line, where only the runtime is.
if said=$("$work/venv/bin/spacy-sapbert" evaluate --dataset ncbi-disease 2>&1); then
    echo "spacy-sapbert evaluate ran on the runtime install"; exit 1
fi
[[ "$said" == *"pip install -e training"* ]] || { echo "spacy-sapbert evaluate said: $said"; exit 1; }
echo "spacy-sapbert link works there, fp32 names the gpu extra, and evaluate names the training package"

# The README's bring-your-own-KB command, verbatim, on the runtime install (no torch: the names
# are encoded with the bundled int8 export), and a link with the index it writes.
"$work/venv/bin/python" - "$root/README.md" <<'PY'
import json, re, sys
readme = open(sys.argv[1], encoding="utf-8").read()
section = readme.split("## Bring your own knowledge base", 1)[1]
record = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
command = re.search(r"```bash\n(spacy-sapbert build-index .*?)\n```", section, re.S).group(1)
open("my_kb.jsonl", "w", encoding="utf-8").write(record + "\n")
# the same concept as HPO ships it, in OBO Graphs JSON, for the command that reads one
concept = json.loads(record)
node = {"id": "http://purl.obolibrary.org/obo/" + concept["concept_id"].replace(":", "_"), "lbl": concept["canonical_name"],
        "type": "CLASS", "meta": {"synonyms": [{"pred": "hasExactSynonym", "val": a} for a in concept["aliases"]]}}
open("hp.json", "w", encoding="utf-8").write(json.dumps({"graphs": [{"nodes": [node]}]}))
assert command.count("spacy-sapbert build-index") == 2, command
open("build.sh", "w", encoding="utf-8").write(command.replace("spacy-sapbert build-index", sys.prefix + "/bin/spacy-sapbert build-index") + "\n")
PY
bash -e build.sh >/dev/null
"$work/venv/bin/python" -c "
import spacy
from spacy.tokens import Span
for index in ('my_index/', 'hp_index/'):
    nlp = spacy.blank('en')
    nlp.add_pipe('sapbert_linker', config={'index': {'index': index}, 'resolve_abbreviations': False})
    doc = nlp.make_doc('cephalgia')
    doc.ents = [Span(doc, 0, 1, 'Disease')]
    assert nlp(doc).ents[0]._.cui == 'HP:0002315', (index, nlp(doc).ents[0]._.kb_ents)
"
echo "the README's build-index commands (JSONL, OBO Graphs JSON) ran there without torch, and the linker searched their indexes"

# The runtime tests of the suite (tests/runtime, and the repository-wide checks at the top of
# tests/) against the installed wheels alone, once at the floors that setup.cfg claims
# (requirements-floors.txt) and once with numpy 2: a test that needs an extra or the training
# package is skipped, naming it (tests/conftest.py); everything else must pass there.
test_pins=$(grep -E '^(pytest|hypothesis)==' "$root/requirements-dev.txt")
for variant in floors numpy2; do
    "$python" -m venv "$work/$variant"
    if [ "$variant" = floors ]; then
        pins=(-r "$root/requirements-floors.txt")
    else
        grep -v '^numpy==' "$root/requirements.txt" > "$work/numpy2.txt"
        pins=(-c "$work/numpy2.txt" "numpy>=2,<3")
    fi
    # shellcheck disable=SC2086
    "$work/$variant/bin/pip" install --quiet --only-binary=:all: "${pins[@]}" "$wheel" "$index_wheel" $test_pins
    "$work/$variant/bin/python" -c "import numpy, spacy; print('$variant: numpy', numpy.__version__, 'spacy', spacy.__version__)"
    if ! (cd "$root" && SPACY_SAPBERT_RUNTIME_TESTS=1 SPACY_SAPBERT_CACHE="$work/cache-$variant" \
            "$work/$variant/bin/pytest" -q -p no:cacheprovider -rfE tests/runtime tests/test_architecture.py \
            tests/test_boundaries.py > "$work/$variant.log" 2>&1); then
        tail -n 40 "$work/$variant.log"; echo "the runtime tests failed ($variant)"; exit 1
    fi
    tail -n 1 "$work/$variant.log"
done
echo "the runtime tests passed at the dependency floors and with numpy 2"
