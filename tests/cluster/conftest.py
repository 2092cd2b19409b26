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
stages.yaml)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from support.wait import eventually

from scheduler.backends.kubernetes.runtime import KubeRuntime, from_settings
from scheduler.cli import settings
from scheduler.controller import watcher
from scheduler.loop.service import Loop, LoopConfig
from scheduler.store.db import Database, open_database

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "controlplane.sh"
JOBS_NS = "shoal-jobs"
RESERVATIONS_NS = "shoal-reservations"  # the chart's reservations.namespace
RELEASE_NS = "shoal-system"
RELEASE = "shoal"
KWOK_LABEL = "type=kwok"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")
Obj = dict[str, Any]


def tool(name: str) -> str | None:
    local = ROOT / ".tools" / "bin" / name
    return str(local) if local.exists() else shutil.which(name)


@dataclass
class ControlPlane:
    """A running control plane, with an admin (system:masters) client."""

    dir: Path
    kubeconfig: Path
    api: Any = field(init=False)

    def __post_init__(self) -> None:
        self.api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    @property
    def server(self) -> str:
        return str(yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        kubectl = tool("kubectl")
        assert kubectl, "kubectl not found"
        proc = subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc

    # --- objects ------------------------------------------------------------------

    def pods(self, ns: str = JOBS_NS, selector: str = "") -> list[Obj]:
        got = self.core.list_namespaced_pod(ns, label_selector=selector)
        return [self.api.sanitize_for_serialization(p) for p in got.items]

    def job_pods(self, job_id: str, ns: str = JOBS_NS) -> list[Obj]:
        return [
            p
            for p in self.pods(ns, "app.kubernetes.io/component=worker")
            if (p["metadata"].get("annotations") or {}).get("shoal.dev/job-id") == job_id
        ]

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        product: str = "NVIDIA-A100-SXM4-80GB",
        gpu_memory: int = 81920,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict[str, str] | None = None,
    ) -> None:
        """A kwok node with `gpus` GPUs, labelled as GPU Feature Discovery would (and
        with `labels`)."""
        alloc = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": product,
                        "nvidia.com/gpu.memory": str(gpu_memory),
                        "nvidia.com/gpu.count": str(gpus),
                        **(labels or {}),
                    },
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
                "status": {"allocatable": alloc, "capacity": alloc},
            }
        )

    def node_ready(self, name: str) -> bool:
        node = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))

    def finish(self, pod: Obj, phase: str = "Succeeded") -> None:
        """The workload ends: kwok moves the pod to `phase`."""
        self.core.patch_namespaced_pod(
            pod["metadata"]["name"],
            pod["metadata"]["namespace"],
            {"metadata": {"annotations": {"shoal.test/phase": phase}}},
        )

    def create_tj(self, name: str, spec: Obj, ns: str = JOBS_NS) -> Obj:
        """Create the TrainingJob `name` with `spec`; the object as created."""
        body = {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
        return dict(
            self.custom.create_namespaced_custom_object(
                "shoal.dev", "v1alpha1", ns, "trainingjobs", body
            )
        )

    def tj(self, name: str, ns: str = JOBS_NS) -> Obj:
        return dict(
            self.custom.get_namespaced_custom_object(
                "shoal.dev", "v1alpha1", ns, "trainingjobs", name
            )
        )

    def reset(self) -> None:
        """Remove what a test left: TrainingJobs, Queues, the jobs namespace's pods,
        Services and ConfigMaps, ResourceQuotas, and the kwok nodes."""
        for kind in ("trainingjobs", "resourcequotas"):
            self.kubectl("delete", kind, "--all", "-n", JOBS_NS, "--wait=false", check=False)
        self.kubectl("delete", "queues", "--all", "--wait=false", check=False)
        for ns in (JOBS_NS, RESERVATIONS_NS, "default"):
            self.kubectl(
                "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False
            )
        for kind in ("services", "configmaps"):
            self.kubectl(
                "delete",
                kind,
                "-n",
                JOBS_NS,
                "-l",
                "app.kubernetes.io/managed-by=shoal",
                check=False,
            )
        self.kubectl("delete", "nodes", "-l", KWOK_LABEL, "--wait=true", check=False)
        eventually(lambda: not self.pods() and not self.pods("default"), timeout=60)


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


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not tool("kubectl") or not tool("helm"):
        _unavailable("kubectl/helm not found (scripts/setup.sh puts them in .tools/bin)")
    given = os.environ.get("SHOAL_CONTROLPLANE_DIR")
    if given and (Path(given) / "admin.kubeconfig").exists():
        yield ControlPlane(Path(given), Path(given) / "admin.kubeconfig")
        return
    bin_dir = Path(
        subprocess.run([str(SCRIPT), "bin"], capture_output=True, text=True).stdout.strip()
    )
    absent = [b for b in BINARIES if not (bin_dir / b).exists()]
    if absent:
        _unavailable(f"{', '.join(absent)} not built in {bin_dir} (scripts/controlplane.sh build)")
    tmp = tmp_path_factory.mktemp("controlplane")
    env = {**os.environ, "TMPDIR": str(tmp)}
    started = subprocess.run(
        [str(SCRIPT), "start"], capture_output=True, text=True, env=env, timeout=300
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/controlplane.sh start failed:\n{started.stderr}", pytrace=False)
    exports = _exports(started.stdout)
    cp_dir = Path(exports["SHOAL_CONTROLPLANE_DIR"])
    try:
        yield ControlPlane(cp_dir, cp_dir / "admin.kubeconfig")
    finally:
        subprocess.run(
            [str(SCRIPT), "stop"],
            env={**env, "SHOAL_CONTROLPLANE_DIR": str(cp_dir)},
            capture_output=True,
            timeout=120,
        )


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


def install(cp: ControlPlane, chart: Chart | None = None, path: Path | None = None) -> Chart:
    """`helm upgrade --install` of helm/shoal as release `shoal` in shoal-system; writes
    the ServiceAccount's token kubeconfig (to `chart`'s path when given)."""
    helm = tool("helm")
    assert helm
    proc = subprocess.run(
        [
            helm, "upgrade", "--install", RELEASE, str(ROOT / "helm" / "shoal"),
            "--namespace", RELEASE_NS, "--create-namespace",
            "--kubeconfig", str(cp.kubeconfig), *CHART_VALUES,
        ],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm install failed:\n{proc.stdout}\n{proc.stderr}"
    sa = "shoal"
    eventually(lambda: cp.core.read_namespaced_service_account(sa, RELEASE_NS))
    target = chart.kubeconfig if chart else path
    assert target is not None
    return Chart(token_kubeconfig(cp, sa, RELEASE_NS, target), sa, CHART_VALUES)


def uninstall(cp: ControlPlane) -> None:
    helm = tool("helm")
    assert helm
    proc = subprocess.run(
        [helm, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--kubeconfig",
         str(cp.kubeconfig), "--wait", "--timeout", "120s"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm uninstall failed:\n{proc.stdout}\n{proc.stderr}"


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


# --- Shoal on this host -------------------------------------------------------------


@dataclass
class Shoal:
    """One Shoal replica as `shoal serve --backend kubernetes` builds it (minus the HTTP
    server): the KubeRuntime from the chart's environment and the loop, in a thread."""

    runtime: KubeRuntime
    loop: Loop
    database: Database
    stop_event: threading.Event
    thread: threading.Thread

    stopped: bool = False

    def diagnose(self, job_id: str | None = None) -> str:
        """What Shoal sees, for a failing test's message."""
        from scheduler.store import jobs

        lines = [
            f"nodes: {[n.name for n in self.runtime.backend.nodes()]}",
            f"excluded: {self.runtime.backend.excluded_nodes()}",
            f"errors: {self.runtime.backend.errors()}",
            f"workers: {self.runtime.backend.workers()}",
        ]
        if job_id:
            with self.database.session() as session:
                row = jobs.get_job(session=session, job_id=job_id)
                lines.append(f"job {job_id}: {row.phase} {getattr(row, 'reason', '')}")
                for e in jobs.list_events(session=session, job_id=job_id):
                    lines.append(f"  event: {e.__dict__}")
        return "\n".join(lines)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.stop_event.set()
        self.loop.wake()
        self.thread.join(timeout=30)
        self.runtime.close()


@pytest.fixture
def shoal_env(chart: Chart, tmp_path: Path) -> dict[str, str]:
    """The environment the chart's Deployment gives the container, with KUBECONFIG in
    place of the in-cluster credentials."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policy: binpack\nminRuntimeSeconds: 0\nstarvationSeconds: 600\n"
        "preemption: true\nintervalSeconds: 0.2\n"
    )
    sc = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (tmp_path / "sc.json").write_text(json.dumps(sc))
    (tmp_path / "kube-options.json").write_text(json.dumps({"reserveNamespace": RESERVATIONS_NS}))
    return {
        "SHOAL_KUBE_OPTIONS_FILE": str(tmp_path / "kube-options.json"),
        "KUBECONFIG": str(chart.kubeconfig),
        "SHOAL_POLICY_FILE": str(policy),
        "SHOAL_WORKER_SECURITY_CONTEXT_FILE": str(tmp_path / "sc.json"),
        "SHOAL_JOBS_NAMESPACE": JOBS_NS,
        "SHOAL_SCHEDULER_NAME": "shoal",
        "SHOAL_RESERVE_IMAGE": "ghcr.io/shoal-dev/shoal:test",
        "SHOAL_LEADER_ELECTION": "false",
        "SHOAL_LEADER_ELECTION_NAMESPACE": RELEASE_NS,
        "SHOAL_LEADER_ELECTION_LEASE": "shoal-scheduler",
        "SHOAL_POD_NAME": "shoal-0",
    }


@pytest.fixture
def start_shoal(tmp_path: Path) -> Iterator[Callable[..., Shoal]]:
    made: list[Shoal] = []
    databases: list[Database] = []

    def start(env: dict[str, str], db_file: str = "shoal.db", resync_s: int = 1) -> Shoal:
        database = open_database(f"sqlite:///{tmp_path / db_file}")
        databases.append(database)
        s = settings.from_env(env)
        pol = settings.load_policy(
            s.policy_file,
            policy="fgd",
            min_runtime_s=0,
            interval_s=0.2,
            worker_tolerations=s.worker_tolerations,
        )
        # A quick CR relist by default (serve: 30 s); status follows the store poll anyway
        # (test_status_follows.py runs with a long relist to show it).
        task = watcher.leader_task(database.session, resync_s=resync_s)
        rt = from_settings(s, leader_tasks=[task])
        loop = Loop(
            database,
            rt.backend,
            config=LoopConfig(
                holder=f"serve-{s.pod_name}",
                interval_s=pol.interval_s,
                core=pol.core,
                is_leader=rt.is_leader,
            ),
        )
        stop = threading.Event()
        thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
        thread.start()
        shoal = Shoal(rt, loop, database, stop, thread)
        made.append(shoal)
        return shoal

    yield start
    for s in made:
        s.stop()
    for d in databases:
        d.close()
