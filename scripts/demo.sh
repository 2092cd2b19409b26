#!/usr/bin/env bash
# The README's first command (`make demo`): start `shoal serve` on the embedded default
# (SQLite, 2 simulated nodes x 4 GPUs, workers as local processes), create a queue,
# submit the PyTorch DDP example (2 workers at 0.5 GPU, on two GPUs: NCCL ranks never
# share one), follow it until it Succeeds
# with its loss falling, show the GPU map, stop the server. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-.venv/bin/shoal}
PORT=${SHOAL_DEMO_PORT:-18787}
export SHOAL_STATE_DIR=${SHOAL_STATE_DIR:-$(mktemp -d /tmp/shoal-demo.XXXXXX)}
export SHOAL_URL="http://127.0.0.1:$PORT"
unset SHOAL_TOKEN
log="$SHOAL_STATE_DIR/serve.log"
mkdir -p "$SHOAL_STATE_DIR"

"$SHOAL" serve --port "$PORT" --state-dir "$SHOAL_STATE_DIR" >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  if [ -s "$SHOAL_STATE_DIR/admin-token" ] && .venv/bin/python -c \
    "import httpx, sys; sys.exit(0 if httpx.get('$SHOAL_URL/healthz').is_success else 1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$server" 2>/dev/null; then
    echo "shoal serve exited early:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.2
done
head -2 "$log"

echo "== create a queue"
"$SHOAL" queues create default --guaranteed 8 --weight 1
"$SHOAL" queues
echo "== submit the PyTorch DDP example (2 workers x 0.5 GPU) and follow worker 0"
"$SHOAL" submit -f examples/pytorch-ddp/job.yaml
"$SHOAL" nodes
"$SHOAL" logs ddp-example -f --worker 0
echo "== the job"
"$SHOAL" job ddp-example
# Read as data (`-o json`), never as a column of the table: columns change.
phase=$("$SHOAL" job ddp-example -o json | .venv/bin/python -c \
  'import json, sys; print(json.load(sys.stdin)["phase"])')
if [ "$phase" != "Succeeded" ]; then
  echo "demo failed: ddp-example is $phase" >&2
  exit 1
fi
echo "demo ok: ddp-example Succeeded (state in $SHOAL_STATE_DIR)"
