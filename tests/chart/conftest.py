"""Fixtures for the chart tests: the helm binary (.tools/bin/helm, from
scripts/install-tools.sh) and a `render` helper returning the parsed documents."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "shoal"
RELEASE, NAMESPACE = "shoal", "shoal-system"
# The plain manifests in deploy/shoal.yaml are exactly this command's output.
DEPLOY_ARGS = ("--include-crds", "--skip-tests", "--set", "auth.existingSecret=shoal-auth")

Render = Callable[..., list[dict[str, Any]]]


def _helm() -> str | None:
    local = ROOT / ".tools" / "bin" / "helm"
    return str(local) if local.exists() else shutil.which("helm")


@pytest.fixture(scope="session")
def helm() -> str:
    path = _helm()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("helm is missing: scripts/install-tools.sh should have installed it")
        pytest.skip("helm not installed (run scripts/install-tools.sh)")
    return path


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False)


def template_text(helm: str, *args: str) -> str:
    out = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    def _render(*set_args: str, **kw: Any) -> list[dict[str, Any]]:
        args: list[str] = []
        for item in set_args:
            args += ["--set", item]
        if kw.get("crds"):
            args.append("--include-crds")
        return [d for d in yaml.safe_load_all(template_text(helm, *args)) if d]

    return _render


def by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def role_rules(docs: list[dict[str, Any]], kind: str, name: str) -> dict[tuple[str, str], set[str]]:
    """A (Cluster)Role's verbs by (apiGroup, resource), its rules merged."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in by_kind(docs, kind, name)["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault((group, res), set()).update(rule["verbs"])
    return out
