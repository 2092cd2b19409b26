"""A running control plane seen from a test: an admin client, kubectl, kwok GPU nodes,
pods and TrainingJobs, and `reset` to empty it between tests; the names every cluster
test shares (namespaces, the release, the repository root)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from support.wait import eventually

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "controlplane.sh"
JOBS_NS = "shoal-jobs"
RESERVATIONS_NS = "shoal-reservations"  # the chart's reservations.namespace
RELEASE_NS = "shoal-system"
RELEASE = "shoal"
KWOK_LABEL = "type=kwok"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")
POOL = {"key": "shoal.dev/pool", "value": "shoal"}  # the chart's nodePool
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
        pool: bool = False,
    ) -> None:
        """A kwok node with `gpus` GPUs, labelled as GPU Feature Discovery would (and
        with `labels`); with `pool`, in Shoal's node pool (the chart's default label and
        NoSchedule taint), where Shoal allocates DRA devices itself."""
        alloc = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
        spec: Obj = {"taints": [{**POOL, "effect": "NoSchedule"}]} if pool else {}
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
                        **({POOL["key"]: POOL["value"]} if pool else {}),
                        **(labels or {}),
                    },
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
                "spec": spec,
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
        Services and ConfigMaps, ResourceQuotas, Workloads, PodGroups, ResourceClaims,
        the DRA driver's slices and classes, and the kwok nodes."""
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
        for kind in ("workloads", "podgroups", "resourceclaims"):
            self.kubectl("delete", kind, "--all", "-n", JOBS_NS, "--wait=false", check=False)
        self.kubectl("delete", "resourceclaims", "--all", "-n", "default", check=False)
        for kind in ("resourceslices", "deviceclasses"):
            self.kubectl("delete", kind, "--all", check=False)
        self.kubectl("delete", "nodes", "-l", KWOK_LABEL, "--wait=true", check=False)
        eventually(lambda: not self.pods() and not self.pods("default"), timeout=60)
