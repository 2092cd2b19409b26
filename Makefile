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

test-fast: setup
	$(VENV)/pytest -x -q -m "not slow"

lint: setup
	$(VENV)/ruff check . && $(VENV)/ruff format --check . && $(VENV)/lint-imports

typecheck: setup
	$(VENV)/mypy

bench: setup
	$(VENV)/python -m bench.fgd_inflation
