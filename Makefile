# openclaw-codex-sidecar: everything a fresh clone needs is installed from here.
#   make demo     the main job: the sidecar in front of a real codex app-server
#                 (make demo ENGINE=lossless: summaries and a recall tool call)
#   make test     the whole test suite (real-codex tests included)
#   make bench    relay benchmark (ratios against a direct connection)
#   make bench-context  projection benchmark (issue 4: tokens and wall, native vs sidecar)
#   make bench-rebuild  what a history rebuild costs codex itself (no sidecar)
#   make fixtures re-record fixtures/ from the real codex and the fake model

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
CODEX_VER   := 0.169.0
CODEX_DIR   := .tools/codex-$(CODEX_VER)
CODEX_BIN   := $(CODEX_DIR)/node_modules/.bin/codex
export CODEX_SIDECAR_TEST_CODEX_BIN := $(abspath $(CODEX_BIN))

.PHONY: all setup demo test bench bench-context bench-rebuild fixtures clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

$(CODEX_BIN):
	mkdir -p $(CODEX_DIR)
	cd $(CODEX_DIR) && npm install --no-audit --no-fund --silent @openai/codex@$(CODEX_VER)
	$(CODEX_BIN) --version

setup: $(VENV)/.installed $(CODEX_BIN)

demo: setup
	$(PY) -m tools.demo --codex-bin $(CODEX_BIN) $(if $(ENGINE),--engine $(ENGINE))

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) -m tools.bench

bench-context: setup
	$(PY) -m tools.bench_context --repeat 3

bench-rebuild: setup
	$(PY) -m tools.bench_rebuild --rounds 6

fixtures: setup
	$(PY) -m tools.record_fixtures --codex-bin $(CODEX_BIN) --out fixtures

clean:
	rm -rf $(VENV) .tools .pytest_cache .hypothesis
