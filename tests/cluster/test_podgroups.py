"""Foreign pods in a PodGroup (scheduling.k8s.io/v1beta1, issue 28 item 4) on a real
kube-apiserver 1.37.2 + kwok: Shoal binds a gang of `minCount` pods whole or not at
all. Too few pods, or too few GPUs for all of them: none is bound, and each says why."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from .conftest import ControlPlane, Shoal, eventually
from .test_coexistence import gpu_pod, read
from .test_jobs import queue
from .test_node_rules import unschedulable

pytestmark = pytest.mark.cluster


def pod_group(cp: ControlPlane, name: str, min_count: int) -> None:
    body = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(body))


def member(name: str, group: str, gpus: int) -> dict[str, object]:
    return gpu_pod(name, gpus, schedulerName="shoal", schedulingGroup={"podGroupName": group})


def bound(cp: ControlPlane, *pods: str) -> list[str | None]:
    return [read(cp, p)["spec"].get("nodeName") for p in pods]


def test_a_pod_group_is_bound_whole_or_not_at_all(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-g1", gpus=4)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: len(shoal.runtime.backend.nodes()) == 1, 60)
    create = cluster.core.create_namespaced_pod
    try:
        pod_group(cluster, "trio", 3)
        create("default", member("trio-0", "trio", 1))
        create("default", member("trio-1", "trio", 1))
        why = eventually(lambda: unschedulable(cluster, "trio-0"), 60)
        assert "PodGroup default/trio: 2 of 3 pods" in why, why
        assert bound(cluster, "trio-0", "trio-1") == [None, None]
        create("default", member("trio-2", "trio", 1))
        eventually(lambda: bound(cluster, "trio-0", "trio-1", "trio-2") == ["kw-g1"] * 3, 60)

        # One GPU is left: a gang of two 1-GPU pods waits whole, neither is bound.
        pod_group(cluster, "pair", 2)
        create("default", member("pair-0", "pair", 1))
        create("default", member("pair-1", "pair", 1))
        why = eventually(lambda: unschedulable(cluster, "pair-1"), 60)
        assert why, why
        assert bound(cluster, "pair-0", "pair-1") == [None, None]
        assert "PodGroup" not in why  # all its pods are there: the reason is room
        create("default", gpu_pod("solo", 1, schedulerName="shoal"))  # not a gang: it fits
        eventually(lambda: bound(cluster, "solo") == ["kw-g1"], 60)
        assert bound(cluster, "pair-0", "pair-1") == [None, None]
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", "default", "--force", check=False)
        cluster.kubectl("delete", "podgroups", "--all", "-n", "default", check=False)
