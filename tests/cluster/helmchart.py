"""The Helm chart on the control plane: install and uninstall helm/shoal as release
`shoal`, and a kubeconfig with its ServiceAccount's token, so that Shoal on this host goes
through exactly the RBAC the chart grants."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from support.wait import eventually

from .controlplane_client import RELEASE, RELEASE_NS, ROOT, ControlPlane, tool


@dataclass
class Chart:
    """The chart installed as release `shoal` in shoal-system, and a kubeconfig that
    authenticates as its ServiceAccount (a TokenRequest token): Shoal on this host goes
    through exactly the RBAC the chart grants."""

    kubeconfig: Path
    service_account: str
    values: list[str]


def token_kubeconfig(cp: ControlPlane, sa: str, ns: str, path: Path) -> Path:
    token = cp.kubectl("create", "token", sa, "-n", ns, "--duration", "4h").stdout.strip()
    ca = (cp.dir / "ca.crt").read_bytes()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": cp.server,
                            "certificate-authority-data": base64.b64encode(ca).decode(),
                        },
                    }
                ],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": sa}}],
                "current-context": "test",
            }
        )
    )
    return path


CHART_VALUES = [
    "--set", "replicaCount=1",
    "--set", "database.type=sqlite",
]  # fmt: skip


def install(
    cp: ControlPlane,
    chart: Chart | None = None,
    path: Path | None = None,
    values: Sequence[str] = (),
) -> Chart:
    """`helm upgrade --install` of helm/shoal as release `shoal` in shoal-system, with
    `values` (`--set` arguments) beside CHART_VALUES; writes the ServiceAccount's token
    kubeconfig (to `chart`'s path when given)."""
    helm = tool("helm")
    assert helm
    proc = subprocess.run(
        [
            helm, "upgrade", "--install", RELEASE, str(ROOT / "helm" / "shoal"),
            "--namespace", RELEASE_NS, "--create-namespace",
            "--kubeconfig", str(cp.kubeconfig), *CHART_VALUES, *values,
        ],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm install failed:\n{proc.stdout}\n{proc.stderr}"
    sa = "shoal"
    eventually(lambda: cp.core.read_namespaced_service_account(sa, RELEASE_NS))
    target = chart.kubeconfig if chart else path
    assert target is not None
    return Chart(token_kubeconfig(cp, sa, RELEASE_NS, target), sa, [*CHART_VALUES, *values])


def uninstall(cp: ControlPlane) -> None:
    helm = tool("helm")
    assert helm
    proc = subprocess.run(
        [helm, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--kubeconfig",
         str(cp.kubeconfig), "--wait", "--timeout", "120s"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm uninstall failed:\n{proc.stdout}\n{proc.stderr}"
