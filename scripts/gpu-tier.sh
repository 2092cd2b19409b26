#!/usr/bin/env bash
# The GPU tier (tests/gpu, issue 23 part 5) on a real NVIDIA GPU host, in one go.
#
#   scripts/gpu-tier.sh fetch   # on a machine with PyPI: the wheels a GPU machine lacks -> .whl/
#   scripts/gpu-tier.sh         # on the GPU machine (no network): install .whl/, run tests/gpu
#
# The GPU machine's own python3 and its torch (a CUDA build) are used as they are: torch
# CUDA wheels are gigabytes, so none is carried. What Shoal needs beyond what that image
# has (FastAPI, pydantic, SQLAlchemy, Alembic, uvicorn, nvidia-ml-py...) is installed from
# .whl/ into a directory of its own, at the versions of this repository's .venv. The log
# goes to $OUT/gpu-tier.log when $OUT is set. The run is bounded by TIER_TIMEOUT (420 s).
set -euo pipefail
cd "$(dirname "$0")/.."

NAMES=(fastapi starlette pydantic pydantic-core annotated-types typing-inspection
  typing-extensions sqlalchemy alembic mako uvicorn nvidia-ml-py)

if [[ "${1:-}" == "fetch" ]]; then
  pins=()
  for n in "${NAMES[@]}"; do
    v=$(.venv/bin/python -m pip show "$n" 2>/dev/null | awk '/^Version:/ {print $2}')
    [[ -n "$v" ]] || { echo "$n is not installed in .venv" >&2; exit 1; }
    pins+=("$n==$v")
  done
  mkdir -p .whl
  # The GPU image's python3 is 3.12 on x86-64 (see docs/gpu.md).
  .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
  du -sh .whl
  exit 0
fi

PY=${PYTHON:-python3}
SITE=/tmp/shoal-site
LOG=${OUT:-/tmp}/gpu-tier.log
"$PY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"' || {
  echo "no usable torch with CUDA in $PY: the GPU tier needs the machine's own" >&2; exit 1; }
ls .whl/*.whl >/dev/null 2>&1 || { echo "no .whl/: run 'scripts/gpu-tier.sh fetch' first" >&2; exit 1; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .whl/*.whl
export PYTHONPATH="$SITE:$PWD"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,mig.mode.current --format=csv
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  echo "nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo absent)"
} 2>&1 | tee "$LOG"
set +e
PYTHONUNBUFFERED=1 timeout "${TIER_TIMEOUT:-420}" "$PY" -m pytest tests/gpu -o addopts="" \
  -p no:cacheprovider -v -rs -s --durations=0 2>&1 | tee -a "$LOG"
code=${PIPESTATUS[0]}
echo "gpu tier exit code: $code" | tee -a "$LOG"
exit "$code"
