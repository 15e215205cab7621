# One command sets everything up on a fresh machine, then does its job. Both targets are idempotent.
VENV    := .venv
PY      := $(VENV)/bin/python
RUNTIME := scripts/malloy_evals/endpoint/node_runner
PYTHON  ?= python3
# The suite runs in two pytest-xdist workers (the machines it is measured on have two cores;
# worksteal evens out the long tests at the end); `make test WORKERS=0` runs it in one process.
WORKERS ?= 2

.PHONY: test demo setup python-env node-runtime sandbox-check

test: setup
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal

# Scores the sample set's recorded runs offline into a scratch folder outside the checkout, then
# measures the A/A noise band and compares the candidate arm with the baseline.
demo: setup
	$(PY) scripts/demo.py

setup: python-env node-runtime sandbox-check

# run_answers.py seals every answerer in bubblewrap (skills/eval-answer/reference/harness.md);
# without it that script refuses to start (or runs UNSEALED with --no-sandbox). Said, not installed.
sandbox-check:
	@command -v bwrap >/dev/null 2>&1 || echo "malloy-evals: bubblewrap (bwrap) is not installed; run_answers.py needs it to seal each answerer: install it (Debian/Ubuntu: apt-get install bubblewrap) and run make again. Tests that need it will fail." >&2

python-env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# The Node Malloy runtime (reference/endpoint.md). `npm install`, not `npm ci`: the lockfile made on this registry
# lacks other platforms' optional DuckDB bindings, which `npm ci` insists on.
node-runtime:
	@if [ ! -f $(RUNTIME)/package.json ]; then exit 0; fi; \
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  echo "malloy-evals: node and npm (Node 20 or newer) are needed for Malloy re-execution; install them (Debian: apt-get install nodejs npm) and run make again. Tests that need Node will skip." >&2; \
	  exit 0; \
	fi; \
	if [ ! -f $(RUNTIME)/node_modules/.installed ] || [ $(RUNTIME)/package-lock.json -nt $(RUNTIME)/node_modules/.installed ]; then \
	  (cd $(RUNTIME) && npm install --no-fund --no-audit --loglevel=error) && \
	  rm -rf $(RUNTIME)/node_modules/@duckdb/duckdb-wasm $(RUNTIME)/node_modules/@motherduck && \
	  touch $(RUNTIME)/node_modules/.installed; \
	fi
