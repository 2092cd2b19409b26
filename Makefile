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

# The pure layer only (core, placement, the life cycle's decide): no process, thread,
# server or database; tests/conftest.py marks everything else `integration`. The paths
# are the pure ones of tests/conftest.py, so only they are collected (imported).
test-fast: setup
	$(VENV)/pytest -x -q -m "not integration and not slow" tests/core tests/placement tests/loop/test_decide.py tests/loop/test_snapshot.py

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
