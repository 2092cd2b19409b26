"""Every resource a kubelet checks, beside kube-scheduler (issue 36 item 2), on a control
plane of its own with kube-scheduler running and the chart installed with its defaults.

The seven pods of the issue on one kwok node of 8 CPUs and 8 GPUs and nothing else: one
asking `example.com/rdma: 1`, one `nvidia.com/mig-1g.10gb: 1`, one `hugepages-2Mi: 1Gi`,
two the same `hostPort: 8080`, two with pod-level `spec.resources.requests.cpu: 6`.
Shoal's copies (`schedulerName: shoal`) go to one node, kube-scheduler's to an identical
second one, at the same time: both bind one host-port pod and one 6-CPU pod and leave
five pending, each with `PodScheduled=False` naming its resource or port.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.backends.kubernetes.view import podfit

from .conftest import ControlPlane, eventually
from .localshoal import Shoal
from .test_jobs import queue

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
OURS, THEIRS = "kw-fit-shoal", "kw-fit-kube"
SMALL = {"cpu": "100m"}
# What each pod asks and a word its reason must hold (one of a pair is bound).
SEVEN: dict[str, tuple[Obj, str]] = {
    "rdma": ({"containers": [{"requests": {**SMALL, "example.com/rdma": "1"},
                              "limits": {"example.com/rdma": "1"}}]},
             "Insufficient example.com/rdma"),
    "mig": ({"containers": [{"requests": {**SMALL, "nvidia.com/mig-1g.10gb": "1"},
                             "limits": {"nvidia.com/mig-1g.10gb": "1"}}]},
            "Insufficient nvidia.com/mig-1g.10gb"),
    "hugepages": ({"containers": [{"requests": {**SMALL, "memory": "1Gi", "hugepages-2Mi": "1Gi"},
                                   "limits": {"memory": "1Gi", "hugepages-2Mi": "1Gi"}}]},
                  "Insufficient hugepages-2Mi"),
    "port-a": ({"containers": [{"requests": SMALL}], "hostPort": 8080}, podfit.PORTS_REASON),
    "port-b": ({"containers": [{"requests": SMALL}], "hostPort": 8080}, podfit.PORTS_REASON),
    "cpu-a": ({"containers": [{}], "podCpu": "6"}, "cpu"),
    "cpu-b": ({"containers": [{}], "podCpu": "6"}, "cpu"),
}  # fmt: skip


def the_pod(name: str, node: str, scheduler: str | None) -> Obj:
    shape, _ = SEVEN[name]
    container: Obj = {"name": "c", "image": "busybox", "resources": shape["containers"][0]}
    if "hostPort" in shape:
        container["ports"] = [{"containerPort": 8080, "hostPort": shape["hostPort"]}]
    spec: Obj = {
        "containers": [container],
        "nodeSelector": {"kubernetes.io/hostname": node},
    }
    if "podCpu" in shape:
        spec["resources"] = {"requests": {"cpu": shape["podCpu"]}}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{node}-{name}", "labels": {"shoal.dev/queue": "vision"}},
        "spec": spec,
    }


def outcome(cp: ControlPlane, node: str) -> tuple[set[str], dict[str, str]]:
    """(the pods of `node`'s set that are bound, pod -> its PodScheduled=False message)."""
    bound, why = set(), {}
    for name in SEVEN:
        pod = cp.core.read_namespaced_pod(f"{node}-{name}", "default")
        if pod.spec.node_name:
            bound.add(name)
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                why[name] = cond.message or ""
    return bound, why


def settled(cp: ControlPlane, node: str) -> tuple[set[str], dict[str, str]]:
    """The outcome once two pods are bound and the other five each say why they wait
    (an AssertionError saying what is missing until then)."""
    bound, why = outcome(cp, node)
    waiting = [n for n in SEVEN if n not in bound and SEVEN[n][1].lower() in why.get(n, "").lower()]
    assert len(bound) == 2 and len(waiting) == 5, (node, sorted(bound), why)
    return bound, why


def test_the_seven_pods_are_placed_or_refused_as_kube_scheduler_places_them(
    beside: ControlPlane, shoal_beside: Shoal
) -> None:
    for node in (OURS, THEIRS):
        beside.add_node(node, gpus=8, cpu="8")
    queue(beside)
    eventually(lambda: {OURS, THEIRS} <= {n.name for n in shoal_beside.runtime.backend.nodes()}, 60)
    for name in SEVEN:
        beside.core.create_namespaced_pod("default", the_pod(name, OURS, "shoal"))
        beside.core.create_namespaced_pod("default", the_pod(name, THEIRS, None))
    results = {}
    for node in (OURS, THEIRS):
        results[node] = eventually(lambda n=node: settled(beside, n), 120, every=1.0)
    for node, (bound, why) in results.items():
        assert len(bound & {"port-a", "port-b"}) == 1 and len(bound & {"cpu-a", "cpu-b"}) == 1
        for name in SEVEN:
            if name not in bound:
                assert SEVEN[name][1].lower() in why[name].lower(), (node, name, why[name])
    # Both schedulers refuse the same five for the same resource or port.
    print({node: sorted(why.items()) for node, (_, why) in results.items()})
