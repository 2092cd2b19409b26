#!/usr/bin/env bash
# Runs lint, type checks and the whole test suite. Starts a throw-away PostgreSQL on
# loopback for the store tests unless SHOAL_TEST_PG_URL already names one.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
V=.venv/bin
if [ -z "${SHOAL_TEST_PG_URL:-}" ] && [ -x scripts/postgres.sh ]; then
  eval "$(scripts/postgres.sh start)"
  trap 'scripts/postgres.sh stop' EXIT
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
