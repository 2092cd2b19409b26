"""Issue 24, working beside Kueue and kube-scheduler on a real kube-apiserver 1.37.2:
a pod still carrying `schedulingGates` is left alone until they are removed (no Binding
the API server must refuse, again and again), and a pending pod of another scheduler
with a `nominatedNodeName` counts as holding its room on that node."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from support.builders import launch_request

from scheduler.backends.kubernetes.pods import workerpod

from .conftest import JOBS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue
from .test_launch import Make, nodes  # noqa: F401 (a fixture)

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
GATE = "kueue.x-k8s.io/admission"


def gpu_pod(name: str, gpus: int, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"shoal.dev/queue": "vision"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
            **spec,
        },
    }


def read(cp: ControlPlane, name: str) -> Obj:
    return dict(cp.api.sanitize_for_serialization(cp.core.read_namespaced_pod(name, "default")))


def test_a_gated_pod_waits_for_its_gates_then_is_bound(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-k1", gpus=4)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: [n.name for n in shoal.runtime.backend.nodes()] == ["kw-k1"], 60)
    cluster.core.create_namespaced_pod(
        "default",
        gpu_pod("gated", 1, schedulerName="shoal", schedulingGates=[{"name": GATE}]),
    )
    eventually(lambda: "gated" in str(shoal.runtime.backend.pod_cache.items()), 30)
    time.sleep(2)  # ten cycles at 0.2 s
    assert shoal.runtime.backend.foreign_pods() == []  # not Shoal's to place yet
    pod = read(cluster, "gated")
    assert not pod["spec"].get("nodeName")
    assert "shoal.dev/job-id" not in (pod["metadata"].get("annotations") or {})
    assert not shoal.runtime.backend.errors(), shoal.runtime.backend.errors()
    # Kueue admits it: the gate goes, and Shoal binds it.
    cluster.core.patch_namespaced_pod("gated", "default", {"spec": {"schedulingGates": None}})
    bound = eventually(lambda: read(cluster, "gated")["spec"].get("nodeName"), 60)
    assert bound == "kw-k1"


def test_a_nominated_pod_of_another_scheduler_holds_its_room(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-k2", gpus=8)
    shoal = start_shoal(shoal_env)
    eventually(
        lambda: [(n.name, n.gpu_count) for n in shoal.runtime.backend.nodes()] == [("kw-k2", 8)]
    )
    # kube-scheduler preempted on kw-k2 for this pod and will bind it there next.
    cluster.core.create_namespaced_pod("default", gpu_pod("incoming", 3))
    assert not read(cluster, "incoming")["spec"].get("nodeName")
    cluster.core.patch_namespaced_pod_status(
        "incoming", "default", {"status": {"nominatedNodeName": "kw-k2"}}
    )
    eventually(
        lambda: [(n.name, n.gpu_count) for n in shoal.runtime.backend.nodes()] == [("kw-k2", 5)]
    )
    # Bound where it was nominated: counted once, on that node.
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "incoming"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kw-k2"},
    }
    cluster.core.create_namespaced_pod_binding(
        "incoming", "default", binding, _preload_content=False
    )
    eventually(lambda: read(cluster, "incoming")["spec"].get("nodeName") == "kw-k2")
    time.sleep(1)
    assert [(n.name, n.gpu_count) for n in shoal.runtime.backend.nodes()] == [("kw-k2", 5)]
    # Gone: its room is free again.
    cluster.core.delete_namespaced_pod("incoming", "default", grace_period_seconds=0)
    eventually(
        lambda: [(n.name, n.gpu_count) for n in shoal.runtime.backend.nodes()] == [("kw-k2", 8)]
    )


def test_a_worker_pod_a_webhook_gated_waits_unbound_then_is_bound(
    nodes: ControlPlane,  # noqa: F811
    make_backend: Make,
) -> None:
    """Shoal's own worker pod, gated at creation (as a Kueue pod-integration webhook
    would): the launch leaves it unbound instead of failing on the refused Binding."""
    b = make_backend()
    req = launch_request("gated-w")
    (p,) = req.placements
    host = f"gated-w-a0-w0.gated-w.{JOBS_NS}.svc"
    body = workerpod.worker_pod(req, p, "gated-w", JOBS_NS, [host], b.config)
    body["spec"]["schedulingGates"] = [{"name": GATE}]
    nodes.core.create_namespaced_pod(JOBS_NS, body)  # what the webhook let through
    b.launch(req)  # finds its pod (same name, same job) and does not bind it
    pod = dict(nodes.api.sanitize_for_serialization(
        nodes.core.read_namespaced_pod("gated-w-a0-w0", JOBS_NS)))  # fmt: skip
    assert not pod["spec"].get("nodeName")
    (w,) = eventually(lambda: [w for w in b.workers() if w.job_id == "gated-w"], 30)
    assert w.message == f"not bound while scheduling gates remain: {GATE}", w
    nodes.core.patch_namespaced_pod("gated-w-a0-w0", JOBS_NS, {"spec": {"schedulingGates": None}})
    bound = eventually(
        lambda: nodes.core.read_namespaced_pod("gated-w-a0-w0", JOBS_NS).spec.node_name, 60
    )
    assert bound == "n1"
