# Image memory for AI agents: one Makefile, used unchanged by CI (.ci/run).
# `make help` lists the targets.

SHELL := /bin/bash
PYTHON ?= python3
export UV_COMPILE_BYTECODE := 1
# Keep uv's cache inside the project when none is configured (fresh machines, CI).
export UV_CACHE_DIR ?= $(CURDIR)/.cache/uv
UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.cache/tools/bin/uv)
HOST ?= 127.0.0.1
PORT ?= 8765
S3RVER := tools/s3rver/node_modules/.bin/s3rver
MCPB := tools/mcpb/node_modules/.bin/mcpb
AXE := tools/axe/node_modules/axe-core/axe.min.js

.DEFAULT_GOAL := help

.PHONY: help
help: ## List every target with what it does
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'
	@echo
	@echo "Variables: HOST and PORT set where \`make run\` listens (now $(HOST):$(PORT)), e.g. make run PORT=9000."
	@echo "A running server answers GET http://HOST:PORT/healthz (is the process up) and"
	@echo "GET /healthz/ready (can it reach its database and object store). docs/runbooks/ has the rest."

$(CURDIR)/.cache/tools/bin/uv:
	@echo "uv not found: installing it with pip into .cache/tools"
	$(PYTHON) -m pip install --quiet --target $(CURDIR)/.cache/tools/lib uv
	@mkdir -p $(CURDIR)/.cache/tools/bin
	@printf '#!/bin/sh\nexec env PYTHONPATH=$(CURDIR)/.cache/tools/lib $(PYTHON) -m uv "$$@"\n' > $@
	@chmod +x $@

.PHONY: uv
uv: $(UV) ## Make sure uv is available (installs it with pip when missing)

# The workspace and its dev tools (pytest, ruff, pyright) from uv.lock, and nothing else: what
# `make lint` and `make typecheck` need. No system packages, no root.
.PHONY: install-python
install-python: uv ## Install the workspace and dev tools from uv.lock only (what lint and typecheck need)
	$(UV) sync --frozen --all-packages

.PHONY: install
install: install-python ## Install the workspace and dev tools from uv.lock, Chromium and Tesseract when missing
	@./scripts/install-chromium.sh
	@./scripts/install-tesseract.sh

# Debian's chromium for scrape_page_screenshot, when no Chromium is found (apt-get, quiet).
# `make install` carries on without it (the tool is then not offered); `make test` needs it.
.PHONY: chromium
chromium: ## Install Debian's chromium when no Chromium is found (fails if it cannot)
	@./scripts/install-chromium.sh --required

# Debian's tesseract-ocr (with English and OSD data) for OCR, when missing (apt-get, quiet).
# `make install` carries on without it (OCR jobs then fail with ocr_unavailable); `make test`
# needs it.
.PHONY: tesseract
tesseract: ## Install Debian's tesseract-ocr when missing (fails if it cannot)
	@./scripts/install-tesseract.sh --required

# Only what the server needs to run: no test, lint or type-check tools. `--inexact` keeps
# anything `make install` already put there, so the two targets can be used in any order.
.PHONY: install-runtime
install-runtime: uv ## Install only the runtime dependencies (what `make run` needs)
	$(UV) sync --frozen --all-packages --no-dev --inexact
	@./scripts/install-tesseract.sh

$(S3RVER): tools/s3rver/package.json tools/s3rver/package-lock.json
	cd tools/s3rver && npm ci --no-audit --no-fund --silent

$(MCPB): tools/mcpb/package.json tools/mcpb/package-lock.json
	cd tools/mcpb && npm ci --no-audit --no-fund --silent

$(AXE): tools/axe/package.json tools/axe/package-lock.json
	cd tools/axe && npm ci --no-audit --no-fund --silent

.PHONY: deps-node
deps-node: $(S3RVER) $(MCPB) $(AXE) ## Install the test peers from npm: s3rver (S3), mcpb (bundle validator), axe-core (accessibility)

.PHONY: run
run: install-runtime ## Serve MCP over HTTP on the embedded default (HOST=127.0.0.1 PORT=8765)
	$(UV) run --frozen --no-sync memory-server serve --transport http --host $(HOST) --port $(PORT)

# A client that starts `make stdio` reads its stdout as MCP (JSON-RPC, one message a line):
# nothing else may go there. So no prerequisite (make would echo its recipe on stdout): the
# install step runs in a sub-make whose every line (make's echo, uv's, the install scripts')
# goes to stderr, and the server's own command line is not echoed. A client running it from
# elsewhere passes `-s` (or `--no-print-directory`), else `make -C DIR` prints "Entering
# directory" on stdout before this file is read.
.PHONY: stdio
stdio: ## Serve MCP over stdio as the identity of MEMORY_API_KEY (stdout carries only the protocol)
	@$(MAKE) --no-print-directory install-runtime >&2
	@exec $(UV) run --frozen --no-sync memory-server serve --transport stdio

.PHONY: key
key: install-runtime ## Create an identity and a key: make key OWNER=you@example.com
	@test -n "$(OWNER)" || { echo "usage: make key OWNER=you@example.com"; exit 2; }
	$(UV) run --frozen --no-sync memory-server admin create-identity --owner "$(OWNER)" --exist-ok
	$(UV) run --frozen --no-sync memory-server admin create-key --owner "$(OWNER)" --scopes read,write,destructive

# `connect` is `memory-server connect` (docs/connect.md): the identity first (as `make key`),
# then a key for the client and its configuration, printed (ARGS=--write merges it into the
# client's file); stdout carries only what `connect` prints (the install step goes to stderr).
# The URL is the server's MEMORY_PUBLIC_BASE_URL, else `make run`'s HOST:PORT
# when either is given here (0.0.0.0 listens everywhere; a client on this machine uses 127.0.0.1).
CONNECT_HOST = $(if $(filter 0.0.0.0 ::,$(HOST)),127.0.0.1,$(HOST))
CONNECT_URL = $(if $(filter command line environment,$(origin HOST) $(origin PORT)),--url http://$(CONNECT_HOST):$(PORT))

.PHONY: connect
connect: ## Set up an MCP client: make connect CLIENT=cursor OWNER=you@example.com [ARGS=--write]
	@test -n "$(CLIENT)" -a -n "$(OWNER)" || { echo "usage: make connect CLIENT=claude-code|claude-desktop|cursor|vscode|codex|windsurf|generic OWNER=you@example.com [ARGS=--write]" >&2; exit 2; }
	@$(MAKE) --no-print-directory install-runtime >&2
	@$(UV) run --frozen --no-sync memory-server admin create-identity --owner "$(OWNER)" --exist-ok >&2
	@$(UV) run --frozen --no-sync memory-server connect "$(CLIENT)" --owner "$(OWNER)" $(CONNECT_URL) $(ARGS)

# Search by meaning in one command: fetch the recommended local model (pinned, verified), then
# re-embed every image with it and switch the active index (no downtime). MODEL=NAME for another.
.PHONY: model
model: install-runtime ## Search by meaning: install the recommended local model and switch to it (MODEL=NAME for another)
	$(UV) run --frozen --no-sync memory-server models install $(MODEL)

.PHONY: migrate
migrate: install-runtime ## Apply database migrations (MEMORY_DATABASE_URL or the embedded default)
	$(UV) run --frozen --no-sync memory-server migrate

.PHONY: test
# pytest workers (pytest-xdist), one per core of this 2-core machine. Each worker owns its
# embedded PostgreSQL (the session fixture, under its own base temp dir), its data dirs and
# the ports it asks the system for; a test file runs whole on one worker, files handed out in
# collection order (the slow end-to-end files first: conftest.py). TEST_WORKERS=1 runs in
# one process. The 30 slowest tests are listed at the end, so every run says where its time went.
TEST_WORKERS ?= 2
# The tests' temporary files (TMPDIR: pytest's base temp dir, the PostgreSQL clusters in it) on
# a RAM file system when the machine has one with room (scripts/test-tmpdir.sh says why);
# empty: the system's default. Passed tests' directories are removed as they pass.
TEST_TMPDIR ?= $(shell ./scripts/test-tmpdir.sh)
TEST_ENV = $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))

test: install deps-node chromium tesseract ## Install everything and run the whole suite, then each library alone
	$(TEST_ENV) $(UV) run --frozen pytest --durations=30 $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
	$(TEST_ENV) UV=$(UV) ./scripts/test-isolated.sh

.PHONY: test-packages
test-packages: uv deps-node ## Check each library in an environment holding only it (imports, collection, its end-to-end tests); install each app alone
	UV=$(UV) ./scripts/test-isolated.sh

.PHONY: lint
lint: install-python ## Ruff lint and format check
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .

.PHONY: typecheck
typecheck: install-python ## Pyright (strict) over packages and apps
	$(UV) run --frozen pyright

.PHONY: manifest
manifest: install ## Regenerate docs/mcp-tool-manifest.generated.json and bundle/manifest.json
	$(UV) run --frozen python scripts/write_manifest.py

# The bundle is the tracked tree (scripts/stage_bundle.py) with bundle/manifest.json at its root;
# a desktop host installs its dependencies with uv (docs/runbooks/desktop-bundle.md).
.PHONY: bundle
bundle: $(MCPB) ## Pack the tracked tree as an MCPB bundle for desktop clients: dist/image-memory.mcpb
	rm -rf .cache/bundle && mkdir -p dist
	$(PYTHON) scripts/stage_bundle.py .cache/bundle
	$(MCPB) pack .cache/bundle dist/image-memory.mcpb

.PHONY: bench
bench: install ## Run the benchmarks under benchmarks/ (ratios against a same-run baseline)
	$(UV) run --frozen python benchmarks/run.py

.PHONY: clean
clean: ## Remove caches and the virtual environment (not your data directory)
	rm -rf .venv .cache .pytest_cache .ruff_cache tools/s3rver/node_modules tools/mcpb/node_modules tools/axe/node_modules test-output
