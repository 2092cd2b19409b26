"""Node inventory: Kubernetes Node and Pod objects in, `scheduler.model.Node`s out (pure).

A node is offered to Shoal when it is Ready and not cordoned, with its labels and taints
(placement honours a job's node selector, affinity and tolerations). Its capacity is the
allocatable CPU, memory and `nvidia.com/gpu`, less what pods Shoal did not place request
(non-terminal pods bound to it): Shoal's own pods are accounted by the scheduler loop from
its placements, so subtracting them here would count them twice. GPU model and memory
come from GPU Feature Discovery labels; `shoal.dev/gpu-model` on a node overrides the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.view import podfit
from scheduler.model import Enforcement, Node, Taint

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
MODEL_OVERRIDE = "shoal.dev/gpu-model"
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # time-slicing or MPS (GFD)
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"  # none | time-slicing | mps (GFD)
SHARED_SUFFIX = "-SHARED"  # GFD's product label on a node that shares its GPUs
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # none | single | mixed
TERMINAL = ("Succeeded", "Failed")


_q = podfit.quantity


def is_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def unschedulable_reason(node: Obj, *, dra: bool = False) -> str | None:
    """Why Shoal may not place on `node`, or None. A taint is no such reason: the node
    is offered with its taints, to the jobs and pods that tolerate them. Where a DRA
    driver publishes the node's GPUs (`dra`), the device plugin's sharing is moot."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    if not is_ready(node):
        return "NotReady"
    return None if dra else sharing_reason(node)


def _int(text: Any, default: int) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


def sharing_reason(node: Obj) -> str | None:
    """Why the node's `nvidia.com/gpu` devices are not whole GPUs Shoal can count, or None.

    Time-slicing (`nvidia.com/gpu.replicas` > 1) advertises each GPU several times: a
    replica shares the card's memory and compute with the others and Shoal cannot tell
    which card it gets, so such a node is excluded (with this reason) rather than counted
    as N x replicas GPUs. With MIG `single`, each device is one slice and GFD labels its
    product (`…-MIG-1g.10gb`) and memory: counted as GPUs of that model. With MIG `mixed`,
    `nvidia.com/gpu` counts only the cards without MIG (slices are other resources),
    which is right as is. Any other node advertising more devices than it has GPUs
    (`nvidia.com/gpu.count`) is excluded too. MPS sharing (`nvidia.com/gpu.sharing-strategy
    =mps`) is not excluded: each replica is an enforced 1/N of a GPU (`mps_replicas`)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if mps_replicas(node):
        return None  # enforced equal slices: `to_node` models them
    replicas = _int(labels.get(REPLICAS_LABEL), 1)
    if replicas > 1:
        return (
            f"time-sliced GPUs ({REPLICAS_LABEL}={replicas}): a replica is not a GPU; "
            "Shoal shares GPUs through its own reservations, use a node pool without "
            "time-slicing"
        )
    alloc = int(_q(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0)))
    count = _int(labels.get(COUNT_LABEL), 0)
    if labels.get(MIG_STRATEGY_LABEL) != "single" and count and alloc > count:
        return (
            f"{alloc} {GPU} devices advertised on {count} GPUs ({COUNT_LABEL}): "
            "shared devices Shoal cannot count as whole GPUs"
        )
    return None


def mps_replicas(node: Obj) -> int:
    """N when the device plugin shares each GPU of the node as N MPS replicas (each an
    enforced 1/N of the GPU's memory and compute; a container may take one), else 0."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    replicas = _int(labels.get(REPLICAS_LABEL), 1)
    return replicas if labels.get(SHARING_LABEL) == "mps" and replicas > 1 else 0


def pod_requests(pod: Obj, reqs: Mapping[str, Fraction] | None = None) -> tuple[int, int, int]:
    """(cpu milli, memory MiB, whole GPUs) a pod holds, as kube-scheduler counts it
    (`podfit.requests`: containers, init containers and sidecars, pod-level requests,
    overhead), rounded up as kube-scheduler rounds; `reqs` is that when the caller has
    it already."""
    got = podfit.requests(pod) if reqs is None else reqs
    cpu, mem, gpu = (got.get(k, Fraction(0)) for k in ("cpu", "memory", GPU))
    return podfit.units("cpu", cpu), podfit.units("", mem / (1024 * 1024)), int(gpu)


def holds_resources(pod: Obj) -> bool:
    """Bound and not finished (a pod being deleted still holds its resources)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL
    )


def claimed_node(pod: Obj, scheduler_name: str) -> str | None:
    """The node whose room a pod holds or is promised: its node when bound and not
    finished; for a pending pod of another scheduler, the node that scheduler nominated
    (kube-scheduler preempted there for it, and binds it there next), else None.
    Shoal's nominees hold nothing for Shoal: their room is its preemptor's already."""
    if holds_resources(pod):
        return str(pod["spec"]["nodeName"])
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    nominated = st.get("nominatedNodeName")
    if (
        nominated
        and spec.get("schedulerName", "default-scheduler") != scheduler_name
        and st.get("phase", "Pending") == "Pending"
        and not pod["metadata"].get("deletionTimestamp")
        and not is_nominee(pod)
    ):
        return str(nominated)
    return None


def is_nominee(pod: Obj) -> bool:
    """A pod Shoal made to hold a preemptor's room for kube-scheduler (`nominees`)."""
    return names.is_managed(pod) and names.labels_of(pod).get(names.COMPONENT) == (
        names.NOMINEE_COMPONENT
    )


def foreign_usage(
    pods: Iterable[Obj], scheduler_name: str = "shoal"
) -> dict[str, tuple[int, int, int]]:
    """node -> (cpu milli, memory MiB, GPUs) requested by pods Shoal did not place (bound,
    or nominated there by another scheduler: `claimed_node`), plus the CPU and memory of
    Shoal's GPU reservation pods (no placement counts those)."""
    used: dict[str, tuple[int, int, int]] = {}
    for pod in pods:
        node = claimed_node(pod, scheduler_name)
        if node is None:
            continue
        reservation = names.labels_of(pod).get(names.COMPONENT) == names.RESERVATION_COMPONENT
        if names.is_shoal_placed(pod) and not (reservation and names.is_managed(pod)):
            continue
        c, m, g = pod_requests(pod)
        if reservation:  # its GPU is its shares' (the loop counts them); CPU and memory not
            g = 0
        uc, um, ug = used.get(node, (0, 0, 0))
        used[node] = (uc + c, um + m, ug + g)
    return used


def to_node(node: Obj, used: tuple[int, int, int] = (0, 0, 0)) -> Node:
    """The capacity Shoal may use on one node (never negative)."""
    meta, alloc = node["metadata"], (node.get("status") or {}).get("allocatable") or {}
    labels = meta.get("labels") or {}
    cpu = int(_q(alloc.get("cpu", 0)) * 1000) - used[0]
    mem = int(_q(alloc.get("memory", 0)) / (1024 * 1024)) - used[1]
    gpus = int(_q(alloc.get(GPU, 0))) - used[2]
    try:
        gpu_mem = int(labels.get(MEMORY_LABEL, "0"))
    except ValueError:
        gpu_mem = 0
    model = labels.get(MODEL_OVERRIDE) or labels.get(PRODUCT_LABEL, "")
    slices = mps_replicas(node)
    if slices:
        # `nvidia.com/gpu` counts replicas, and the plugin, not Shoal, picks the GPU of
        # each: only GPUs whose every replica may still be free are offered (a foreign
        # pod's replica costs one GPU here), so Shoal never hands out more than is free.
        gpus //= slices
        model = model.removesuffix(SHARED_SUFFIX)  # gpuType names the card, not the mode
    return Node(
        name=meta["name"],
        cpu_milli=max(cpu, 0),
        memory_mib=max(mem, 0),
        gpu_count=max(gpus, 0),
        gpu_model=model,
        gpu_memory_mib=gpu_mem,
        enforcement=Enforcement.MPS if slices else Enforcement.ADVISORY,
        slices=slices,
        labels=dict(labels),
        taints=tuple(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute", "PreferNoSchedule")
        ),
    )


def schedulable_nodes(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[Node]:
    used = foreign_usage(pods)
    out = [
        to_node(n, used.get(n["metadata"]["name"], (0, 0, 0)))
        for n in nodes
        if unschedulable_reason(n) is None
    ]
    return sorted(out, key=lambda n: n.name)


class Capacity:
    """What each node could hold if empty, for admission's "can never run": every node
    whose `nvidia.com/gpu` Shoal can count (`sharing_reason` None), cordoned, tainted
    and NotReady ones included (they may come back), with no pod's usage taken off.
    A node's `Node` is kept while its object is the same (the cache replaces an object
    on every change, never mutates it), so a call costs what changed."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[Obj, Node | None]] = {}

    def __call__(self, nodes: Iterable[Obj]) -> list[Node]:
        memo: dict[str, tuple[Obj, Node | None]] = {}
        for n in nodes:
            name = n["metadata"]["name"]
            hit = self._memo.get(name)
            if hit is None or hit[0] is not n:
                hit = (n, to_node(n) if sharing_reason(n) is None else None)
            memo[name] = hit
        self._memo = memo
        return sorted((m[1] for m in memo.values() if m[1] is not None), key=lambda x: x.name)
