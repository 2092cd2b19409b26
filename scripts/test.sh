#!/usr/bin/env bash
# Runs lint, type checks and the whole test suite. Starts a throw-away PostgreSQL on
# loopback for the store tests unless SHOAL_TEST_PG_URL already names one, and a
# Kubernetes control plane (scripts/controlplane.sh; built once from Go modules into
# ~/.cache/shoal-controlplane when `go` is there) for tests/cluster unless
# SHOAL_CONTROLPLANE_DIR already names one. SHOAL_SKIP_CLUSTER=1 leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
V=.venv/bin
STOPS=()
trap 'for s in "${STOPS[@]}"; do $s || true; done' EXIT
if [ -z "${SHOAL_TEST_PG_URL:-}" ] && [ -x scripts/postgres.sh ]; then
  eval "$(scripts/postgres.sh start)"
  STOPS+=("scripts/postgres.sh stop")
fi
if [ -z "${SHOAL_CONTROLPLANE_DIR:-}" ] && [ "${SHOAL_SKIP_CLUSTER:-0}" != 1 ] \
  && [ -x scripts/controlplane.sh ]; then
  if command -v go >/dev/null || [ "${SHOAL_REQUIRE_CLUSTER:-0}" = 1 ]; then
    scripts/controlplane.sh build
  fi
  if [ -x "$(scripts/controlplane.sh bin)/kube-apiserver" ]; then
    eval "$(scripts/controlplane.sh start)"
    STOPS+=("scripts/controlplane.sh stop")
  else
    echo "test.sh: no control plane (no go to build it): tests/cluster will skip" >&2
  fi
fi
$V/ruff check .
$V/ruff format --check .
$V/lint-imports
$V/mypy
set +e
$V/pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
