"""Nominees (issue 36 item 5): while the victims of a preemption terminate, a gated pod of
kube-scheduler's with the victim's requests and `nominatedNodeName` its node keeps
kube-scheduler's pods off the room; Shoal does not count it, and it goes once its victim
has been gone `nominee_hold_s`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.pods.nominees import GATE, VICTIM_UID, nominee_pod
from scheduler.backends.kubernetes.view import inventory

from .conftest import eventually, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
RES_NS = "shoal-reservations"


def adopted(name: str, gpus: int, node_name: str = "n1") -> dict[str, Any]:
    """A foreign pod Shoal bound: GPUs, CPU and memory on `node_name`."""
    p = pod(
        name,
        node_name=node_name,
        scheduler="shoal",
        labels={"shoal.dev/queue": "q"},
        annotations={"shoal.dev/job-id": f"pod:default/{name}", "shoal.dev/node": node_name,
                     "shoal.dev/gpus": ",".join(str(g) for g in range(gpus))},
        requests={"nvidia.com/gpu": str(gpus), "cpu": "2", "memory": "4Gi"},
    )  # fmt: skip
    p["metadata"]["uid"] = f"uid-{name}"
    return p


def test_a_nominee_carries_the_victims_requests_and_is_never_scheduled() -> None:
    config = KubeConfig(reserve_namespace=RES_NS, reserve_priority_class="shoal-gpu-reservation")
    made = nominee_pod(adopted("a", 4), "default-scheduler", config)
    assert made is not None
    spec = made["spec"]
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["schedulingGates"] == [{"name": GATE}]
    assert spec["priorityClassName"] == "shoal-gpu-reservation"
    assert spec["containers"][0]["resources"]["requests"] == {
        "cpu": "2000m", "memory": "4096Mi", "nvidia.com/gpu": "4"
    }  # fmt: skip
    assert made["metadata"]["namespace"] == RES_NS
    assert made["metadata"]["annotations"][VICTIM_UID] == "uid-a"
    unbound = pod("u", phase="Pending")  # holds no node: nothing to keep
    assert nominee_pod(unbound, "default-scheduler", config) is None


def test_shoal_does_not_count_its_nominees_but_counts_kube_schedulers() -> None:
    config = KubeConfig(reserve_namespace=RES_NS)
    mine = nominee_pod(adopted("a", 4), "default-scheduler", config)
    assert mine is not None
    mine["status"] = {"phase": "Pending", "nominatedNodeName": "n1"}
    theirs = pod("k", phase="Pending", requests={"nvidia.com/gpu": "2"})
    theirs["status"]["nominatedNodeName"] = "n1"
    assert inventory.claimed_node(mine, "shoal") is None
    assert inventory.foreign_usage([mine, theirs]) == {"n1": (0, 0, 2)}


def test_a_preempted_pod_leaves_a_nominee_until_it_has_been_gone_a_while(
    kube: FakeKube, make_backend: Make
) -> None:
    kube.put("nodes", node("n1", gpus=8))
    kube.put("pods", adopted("a", 4))
    kube.put("pods", adopted("c", 2))
    b = make_backend(reserve_namespace=RES_NS, nominee_hold_s=2.0)
    eventually(lambda: len(b.foreign_running()) == 2, timeout=20)
    # A cancel keeps no room for anyone.
    b.stop("pod:default/c", 30, reason=base.StopReason.CANCELLED)
    assert kube.objects("pods", RES_NS) == []
    b.stop("pod:default/a", 30, reason=base.StopReason.PREEMPTED)
    [made] = kube.objects("pods", RES_NS)  # made before the victim's delete
    assert made["status"]["nominatedNodeName"] == "n1"
    assert made["spec"]["schedulingGates"] == [{"name": GATE}]
    # The victim is gone (the fake deletes at once): an upkeep pass after the hold
    # takes the nominee away.
    assert kube.get("pods", "a", "default") is None
    eventually(lambda: not kube.objects("pods", RES_NS), timeout=30, what="nominee swept")
