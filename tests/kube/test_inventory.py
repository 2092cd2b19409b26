"""Inventory: Nodes listed and watched into `scheduler.model.Node`s, with exclusions and
foreign usage subtracted; the watch resumes, and relists on 410 Gone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.reservations import reservationpod
from scheduler.backends.kubernetes.view import inventory
from scheduler.model import Node, Taint

from .conftest import eventually, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]


def names_of(b: KubernetesBackend) -> list[str]:
    return [n.name for n in b.nodes()]


def test_gpu_nodes_appear_in_the_inventory(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend()
    (n1,) = b.nodes()
    assert replace(n1, labels={}) == Node(
        "n1", 64000, 512 * 1024, 8, "NVIDIA-A100-SXM4-80GB", 81920
    )
    assert n1.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    kube.put("nodes", node("n2", gpus=4, product="NVIDIA-H100-80GB-HBM3", cpu="7800m"))
    n2 = eventually(lambda: next((n for n in b.nodes() if n.name == "n2"), None))
    assert (n2.gpu_count, n2.gpu_model, n2.cpu_milli) == (4, "NVIDIA-H100-80GB-HBM3", 7800)
    kube.remove("nodes", "n1")
    eventually(lambda: names_of(b) == ["n2"])


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        pytest.param(node("n2", ready=False), "NotReady", id="not-ready"),
        pytest.param(node("n2", unschedulable=True), "cordoned", id="cordoned"),
    ],
)
def test_unusable_nodes_are_excluded(
    kube: FakeKube, make_backend: Make, obj: dict[str, object], why: str
) -> None:
    kube.put("nodes", node("n1"))
    kube.put("nodes", obj)
    b = make_backend()
    assert names_of(b) == ["n1"]
    assert b.excluded_nodes() == {"n2": why}


def test_node_going_not_ready_is_excluded_then_back(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend()
    assert names_of(b) == ["n1"]
    kube.update(
        "nodes",
        "n1",
        "",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
                ]
            }
        },
    )
    eventually(lambda: names_of(b) == [])
    kube.put("nodes", node("n1"))
    eventually(lambda: names_of(b) == ["n1"])


def test_tainted_nodes_are_offered_with_their_taints(kube: FakeKube, make_backend: Make) -> None:
    """Placement judges taints against each job's tolerations (issue 24 item 1): a
    tainted node is not excluded, it carries its taints (not the kubelet's own kinds)."""
    kube.put("nodes", node("n1", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    kube.put("nodes", node("n2", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]))
    kube.put("nodes", node("n3", taints=[{"key": "x", "value": "y", "effect": "NoExecute"}]))
    b = make_backend()
    assert {n.name: n.taints for n in b.nodes()} == {
        "n1": (Taint("nvidia.com/gpu", "", "NoSchedule"),),
        "n2": (Taint("soft", "", "PreferNoSchedule"),),
        "n3": (Taint("x", "y", "NoExecute"),),
    }
    assert b.excluded_nodes() == {}


def test_foreign_pods_usage_is_subtracted(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    kube.put(
        "pods",
        pod(
            "infer", node_name="n1", requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
        ),
    )
    kube.put(
        "pods",
        pod(
            "done", node_name="n1", phase="Succeeded", requests={"cpu": "8", "nvidia.com/gpu": "4"}
        ),
    )
    kube.put("pods", pod("unbound", requests={"cpu": "8", "nvidia.com/gpu": "4"}, phase="Pending"))
    b = make_backend()
    (n1,) = b.nodes()
    assert (n1.cpu_milli, n1.memory_mib, n1.gpu_count) == (60000, 496 * 1024, 6)
    kube.put("pods", pod("more", node_name="n1", requests={"nvidia.com/gpu": "6", "cpu": "500m"}))
    eventually(lambda: b.nodes()[0].gpu_count == 0)
    assert b.nodes()[0].cpu_milli == 59500


def test_watch_relists_after_410_gone(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(watch_timeout_s=1)
    before = b.node_cache.relists
    kube.compact()  # the backend's resourceVersion is now too old
    kube.put("nodes", node("n2"))  # still seen: through the relist
    kube.compact()
    eventually(lambda: b.node_cache.relists > before, timeout=5)
    eventually(lambda: names_of(b) == ["n1", "n2"])


def test_watch_answering_http_410_relists(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(watch_timeout_s=1)
    before = b.node_cache.relists
    kube.inject(1, 410, path="/api/v1/nodes", method="GET")
    kube.put("nodes", node("n2"))
    eventually(lambda: names_of(b) == ["n1", "n2"])
    eventually(lambda: b.node_cache.relists > before, timeout=5)


def test_time_sliced_and_oversubscribed_nodes_are_excluded_with_the_reason() -> None:
    from scheduler.backends.kubernetes.view import inventory

    sliced = node("ts", gpus=16)  # 4 cards x 4 replicas
    sliced["metadata"]["labels"].update(
        {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"}
    )
    why = inventory.unschedulable_reason(sliced)
    assert why is not None and "time-sliced" in why and "replicas=4" in why
    renamed = node("odd", gpus=8)
    renamed["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    assert "advertised on 2 GPUs" in (inventory.unschedulable_reason(renamed) or "")
    # MIG single: each slice is a device of its own model and memory; counted as such.
    mig = node("mig", gpus=14, product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", gpu_memory=9856)
    mig["metadata"]["labels"].update(
        {"nvidia.com/gpu.count": "2", "nvidia.com/mig.strategy": "single"}
    )
    assert inventory.unschedulable_reason(mig) is None
    n = inventory.to_node(mig)
    assert (n.gpu_count, n.gpu_model, n.gpu_memory_mib) == (
        14,
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        9856,
    )
    assert inventory.schedulable_nodes([sliced, renamed, mig], []) == [n]


def test_reservation_pods_cpu_and_memory_are_counted(kube: FakeKube, make_backend: Make) -> None:
    from scheduler.backends.kubernetes import KubeConfig
    from scheduler.backends.kubernetes.view import inventory

    res = reservationpod.reservation_pod("n1", 0, KubeConfig())
    res["spec"]["nodeName"] = "n1"
    res["status"] = {"phase": "Running"}
    used = inventory.foreign_usage([res])
    assert used == {"n1": (10, KubeConfig().reserve_memory_mib, 0)}  # its GPU is the shares'


def test_lists_are_paginated_and_the_cache_is_slim(kube: FakeKube, make_backend: Make) -> None:
    for i in range(5):
        p = pod(f"p{i}", node_name="n1", requests={"cpu": "1"})
        p["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
        kube.put("pods", p)
    kube.put("nodes", node("n1"))
    b = make_backend(list_page_size=2)
    pods = eventually(lambda: len(b.pod_cache.items()) == 5 and b.pod_cache.items())
    pages = [r for r in kube.requests if r == ("GET", "/api/v1/pods")]
    assert len(pages) >= 3  # 2 + 2 + 1
    assert all("managedFields" not in p["metadata"] for p in pods)
    assert b.nodes()[0].cpu_milli == 64000 - 5000


def test_pod_requests_count_sidecars_init_containers_and_overhead() -> None:
    """As kube-scheduler counts them (issue 24 item 8): a sidecar (an init container with
    `restartPolicy: Always`) adds to the containers' sum; a plain init container counts
    alone, with the sidecars started before it, when that is larger; `spec.overhead`
    adds on top."""

    def c(cpu: str, mem: str, gpu: str = "0", **extra: str) -> dict[str, object]:
        req = {"cpu": cpu, "memory": mem, "nvidia.com/gpu": gpu}
        return {"name": f"c{cpu}{mem}", "resources": {"requests": req}, **extra}

    plain = {"spec": {"containers": [c("2", "1Gi", "1"), c("1", "1Gi")]}}
    assert inventory.pod_requests(plain) == (3000, 2048, 1)
    with_sidecar = {
        "spec": {
            "initContainers": [c("500m", "512Mi", restartPolicy="Always")],
            "containers": [c("2", "1Gi", "1")],
        }
    }
    assert inventory.pod_requests(with_sidecar) == (2500, 1536, 1)
    # A plain init container after a sidecar runs beside it: 3 + 0.5 CPUs > 2 + 0.5.
    big_init = {
        "spec": {
            "initContainers": [c("500m", "512Mi", restartPolicy="Always"), c("3", "256Mi")],
            "containers": [c("2", "1Gi", "1")],
        }
    }
    assert inventory.pod_requests(big_init) == (3500, 1536, 1)
    overhead = {
        "spec": {"containers": [c("2", "1Gi")], "overhead": {"cpu": "250m", "memory": "120Mi"}}
    }
    assert inventory.pod_requests(overhead) == (2250, 1144, 0)
