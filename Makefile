# Developer entry points. `make demo` and `make test` are the README's two commands.
VENV := .venv/bin
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: setup demo serve test test-fast lint typecheck bench chart-check

setup:
	scripts/setup.sh

demo: setup
	scripts/demo.sh

serve: setup
	$(VENV)/shoal serve

# The whole suite, with a real PostgreSQL started on loopback for the store tests.
test: setup
	scripts/test.sh

# The fast tier: every test that starts nothing outside its own thread (no server,
# process, control plane, browser or PostgreSQL): the core, the life cycle, and the
# loop, backend, API and store logic on SQLite. tests/conftest.py says how a test is tiered.
test-fast: setup
	$(VENV)/pytest -q -m "not integration and not slow" tests

# The Helm chart: helm lint, every rendering against the Kubernetes schemas, the
# ServiceMonitor and Grafana dashboard, deploy/shoal.yaml in sync with the chart, and the
# Dockerfile (hadolint).
chart-check: setup
	$(VENV)/pytest -q tests/chart

lint: setup
	$(VENV)/ruff check . && $(VENV)/ruff format --check . && $(VENV)/lint-imports

typecheck: setup
	$(VENV)/mypy

bench: setup
	$(VENV)/python -m bench.fgd_inflation
