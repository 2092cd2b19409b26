"""Fixtures for the cluster tests: a real control plane (etcd, kube-apiserver,
kube-controller-manager, kwok; scripts/controlplane.sh), the Helm chart installed onto
it, and Shoal running on this host with the chart's ServiceAccount token.

The control plane is the one `scripts/test.sh` started (SHOAL_CONTROLPLANE_DIR), else
one started here for the session. Without the binaries (scripts/controlplane.sh build)
the tests skip, unless SHOAL_REQUIRE_CLUSTER=1 (CI), where they fail.

kwok plays the kubelet: a pod bound to a kwok node goes Running; the annotation
`shoal.test/phase: Succeeded|Failed` ends it; `shoal.test/graceful: "true"` keeps a
deleted pod Terminating for its whole grace period; the node label
`shoal.test/not-ready=true` turns the node NotReady (tests/cluster/controlplane/kwok/
stages.yaml).

The helpers live beside this file: controlplane_client.py (the admin client, kwok nodes,
reset), helmchart.py (install/uninstall, the ServiceAccount's kubeconfig) and localshoal.py
(Shoal on this host); the tests import them from here."""

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wait import eventually

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.config import KubeConfig, api_client
from scheduler.store.db import Database, open_database

from .controlplane_client import (
    BINARIES,
    JOBS_NS,
    KWOK_LABEL,
    RELEASE,
    RELEASE_NS,
    RESERVATIONS_NS,
    ROOT,
    SCRIPT,
    ControlPlane,
    Obj,
    tool,
)
from .helmchart import CHART_VALUES, Chart, install, token_kubeconfig, uninstall
from .localshoal import Shoal, chart_env, launch

# The cluster tests import these from here (`from .conftest import ...`).
__all__ = [
    "BINARIES", "CHART_VALUES", "JOBS_NS", "KWOK_LABEL", "RELEASE", "RELEASE_NS",
    "RESERVATIONS_NS", "ROOT", "SCRIPT", "Chart", "ControlPlane", "Obj", "Shoal",
    "eventually", "install", "token_kubeconfig", "tool", "uninstall",
]  # fmt: skip


def _unavailable(why: str) -> None:
    if os.environ.get("SHOAL_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"SHOAL_REQUIRE_CLUSTER=1 but {why}", pytrace=False)
    pytest.skip(why)


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export ") :].split("=", 1)
            out[k] = v
    return out


def _started(tmp: Path, **env: str) -> Iterator[ControlPlane]:
    """A control plane of its own under `tmp` (scripts/controlplane.sh start), stopped
    after; `env` adds to the script's environment (SHOAL_CONTROLPLANE_SCHEDULER=1)."""
    if not tool("kubectl") or not tool("helm"):
        _unavailable("kubectl/helm not found (scripts/setup.sh puts them in .tools/bin)")
    bin_dir = Path(
        subprocess.run([str(SCRIPT), "bin"], capture_output=True, text=True).stdout.strip()
    )
    absent = [b for b in BINARIES if not (bin_dir / b).exists()]
    if absent:
        _unavailable(f"{', '.join(absent)} not built in {bin_dir} (scripts/controlplane.sh build)")
    full = {**os.environ, "TMPDIR": str(tmp), **env}
    started = subprocess.run(
        [str(SCRIPT), "start"], capture_output=True, text=True, env=full, timeout=300
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/controlplane.sh start failed:\n{started.stderr}", pytrace=False)
    cp_dir = Path(_exports(started.stdout)["SHOAL_CONTROLPLANE_DIR"])
    try:
        yield ControlPlane(cp_dir, cp_dir / "admin.kubeconfig")
    finally:
        subprocess.run(
            [str(SCRIPT), "stop"],
            env={**full, "SHOAL_CONTROLPLANE_DIR": str(cp_dir)},
            capture_output=True,
            timeout=120,
        )


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    given = os.environ.get("SHOAL_CONTROLPLANE_DIR")
    if given and (Path(given) / "admin.kubeconfig").exists():
        if not tool("kubectl") or not tool("helm"):
            _unavailable("kubectl/helm not found (scripts/setup.sh puts them in .tools/bin)")
        yield ControlPlane(Path(given), Path(given) / "admin.kubeconfig")
        return
    yield from _started(tmp_path_factory.mktemp("controlplane"))


@pytest.fixture(scope="session")
def beside_kube_scheduler(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, Chart]]:
    """A second control plane, with kube-scheduler running (default profile) and the
    chart installed: Shoal shares the cluster with the default scheduler, which binds
    pods and allocates DRA claims at the same time. One for the session (its start is
    most of a short test's time); each test resets it before use."""
    tmp = tmp_path_factory.mktemp("withscheduler")
    for cp in _started(tmp, SHOAL_CONTROLPLANE_SCHEDULER="1"):
        yield cp, install(cp, path=tmp / "shoal-sa.kubeconfig")


@pytest.fixture
def beside(beside_kube_scheduler: tuple[ControlPlane, Chart]) -> Iterator[ControlPlane]:
    """The control plane with kube-scheduler (`beside_kube_scheduler`), reset before and
    after the test."""
    cp, _ = beside_kube_scheduler
    cp.reset()
    yield cp
    cp.reset()


@pytest.fixture
def shoal_beside(
    beside: ControlPlane,
    beside_kube_scheduler: tuple[ControlPlane, Chart],
    start_shoal: Callable[..., Shoal],
    tmp_path: Path,
) -> Shoal:
    """Shoal on `beside` as the chart's Deployment runs it (its defaults), stopped after
    the test, before the reset."""
    _, chart = beside_kube_scheduler
    return start_shoal(chart_env(chart.kubeconfig, tmp_path))


@pytest.fixture(scope="session")
def chart(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Chart:
    path = tmp_path_factory.mktemp("chart") / "shoal-sa.kubeconfig"
    return install(control_plane, path=path)


@pytest.fixture
def cluster(control_plane: ControlPlane, chart: Chart) -> Iterator[ControlPlane]:
    """The control plane with the chart installed, emptied again after the test."""
    control_plane.reset()
    yield control_plane
    control_plane.reset()


@pytest.fixture
def shoal_env(chart: Chart, tmp_path: Path) -> dict[str, str]:
    """The environment the chart's Deployment gives the container (localshoal.chart_env)."""
    return chart_env(chart.kubeconfig, tmp_path)


@pytest.fixture
def start_shoal(tmp_path: Path) -> Iterator[Callable[..., Shoal]]:
    made: list[Shoal] = []
    databases: list[Database] = []

    def start(env: dict[str, str], db_file: str = "shoal.db", resync_s: int = 1) -> Shoal:
        database = open_database(f"sqlite:///{tmp_path / db_file}")
        databases.append(database)
        shoal = launch(database, env, resync_s)
        made.append(shoal)
        return shoal

    yield start
    for s in made:
        s.stop()
    for d in databases:
        d.close()


@pytest.fixture
def make_backend(chart: Chart) -> Iterator[Callable[..., KubernetesBackend]]:
    """A KubernetesBackend with the chart's ServiceAccount (its RBAC), closed after."""
    made: list[KubernetesBackend] = []

    def make(**overrides: Any) -> KubernetesBackend:
        cfg = KubeConfig(
            namespace=JOBS_NS,
            reserve_namespace=RESERVATIONS_NS,
            kubeconfig=str(chart.kubeconfig),
            reconcile_interval_s=0.5,
            **overrides,
        )
        b = KubernetesBackend(cfg, client=api_client(cfg), sync_timeout_s=120)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()
