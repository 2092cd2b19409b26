"""A foreign pod's own ResourceClaims: what it asks of the placement, and their
allocation when Shoal binds it.

A pod someone else made (`schedulerName: shoal`) may name ResourceClaims, its own or
made by the resourceclaim controller from its templates. Shoal takes them as they are:
the pod may go only to nodes whose devices satisfy every claim's requests (its class and
CEL selectors, devices not in use); if no node does, it waits with the request's reason
(the selector that refused, the device that was in use). The devices of the GPU
DeviceClass count as the pod's GPUs, so that placement keeps them from Shoal's own jobs.
At the bind, the devices are chosen again on the placed node, the placement's GPU indices
first, and written to each claim's status (allocation and `reservedFor` the pod) with
the delete-protection finalizer, exactly as for Shoal's own claims (`claimobjects`), and
checked against every claim read back (`DraClaims.verify`). Only on nodes of Shoal's
pool (`nodepool`): a pod whose claims fit only elsewhere waits, saying so (kube-scheduler
allocates there).

A claim allocated already (another pod's, by Shoal or kube-scheduler) is shared, as
kube-scheduler shares it: the pod may go only where its `allocation.nodeSelector` selects,
its devices are the claim's (not the pod's GPUs: counted once, for the claim's first
pod), and at the bind the pod is appended to `status.reservedFor` (at most 256 entries: a
full claim is a reason to wait). The write carries the resourceVersion read, so no other
consumer is dropped and no entry the resourceclaim controller removed (a pod that is
gone) comes back; on a conflict the claim is read again. A claim that another pod
allocated while this one was being placed is shared the same way, if the node agrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.backends.kubernetes import dra, nodepool
from scheduler.backends.kubernetes.client.api import STRATEGIC_PATCH, Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.backends.kubernetes.dra import claimobjects
from scheduler.backends.kubernetes.dra.draclaims import DraClaims, DraUnfit
from scheduler.backends.kubernetes.view.status import ForeignPod
from scheduler.model import Node, NodeRules, Requirement, WorkerPlacement
from scheduler.placement import eligible

Obj = dict[str, Any]
MAX_RESERVED = 256  # ResourceClaimReservedForMaxSize: kube-apiserver refuses more
CONFLICT_RETRIES = 5  # re-reads of a shared claim other consumers keep changing


@dataclass(frozen=True)
class _Claims:
    """A pod's claims: the requests of those Shoal allocates for it, and those it shares
    (allocated already), by namespace/name."""

    requests: list[dra.Request]
    shared: dict[str, Obj]


def _allocated(obj: Obj) -> bool:
    return bool((obj.get("status") or {}).get("allocation"))


def _reserved(obj: Obj) -> list[Obj]:
    return list((obj.get("status") or {}).get("reservedFor") or [])


def _selector_rules(obj: Obj) -> NodeRules | None:
    """The nodes an allocated claim's `allocation.nodeSelector` selects (None: any
    node, a device not bound to one)."""
    selector = ((obj.get("status") or {}).get("allocation") or {}).get("nodeSelector")
    if not selector:
        return None
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}
    return eligible.rules(None, affinity, None)


class ForeignClaims:
    def __init__(self, kube: Kube, claims: DraClaims) -> None:
        self.kube, self.claims = kube, claims

    def _read(self, pod: ForeignPod) -> _Claims | str:
        """The pod's claims as the cache shows them, or why it cannot be placed."""
        state = self.claims.state()
        out = _Claims([], {})
        for name in pod.dra_claims:
            key = f"{pod.namespace}/{name}"
            obj = state.claims.get(key) if name else None
            if obj is None:
                made = f'"{name}" is not there' if name else "is not made from its template yet"
                return f"ResourceClaim {made} (pod {pod.namespace}/{pod.name})"
            if _allocated(obj):
                full = self._full(key, obj, pod.uid)
                if full:
                    return full
                out.shared[key] = obj
                continue
            got = dra.requests_of(obj)
            if isinstance(got, str):
                return got
            out.requests.extend(got)
        return out

    @staticmethod
    def _full(key: str, obj: Obj, uid: str) -> str:
        """Why the pod cannot join the claim's consumers ("": it can)."""
        reserved = _reserved(obj)
        if len(reserved) < MAX_RESERVED or any(r.get("uid") == uid for r in reserved):
            return ""
        return (
            f"ResourceClaim {key} is reserved for {len(reserved)} pods, the most "
            "kube-apiserver allows (status.reservedFor); it waits for one to finish"
        )

    def request(self, pod: ForeignPod) -> tuple[float, NodeRules | None]:
        """(GPUs its claims take, the nodes whose devices satisfy them all, or why none).
        The claims it shares take none of its GPUs and allow only their nodes."""
        got = self._read(pod)
        if isinstance(got, str):
            return 0.0, NodeRules(blocked=got)
        shared: NodeRules | None = None
        for obj in got.shared.values():
            shared = eligible.also(shared, _selector_rules(obj))
        if not got.requests:
            return 0.0, shared
        state = self.claims.state()
        classes = self.claims.device_classes()
        nodes, why = dra.nodes_for(got.requests, state.usage.inventory, classes, state.usage)
        gpu_classes = (self.claims.config.dra_gpu_class,)
        gpus = float(sum(r.count for r in got.requests if r.device_class in gpu_classes))
        if not nodes:
            return gpus, NodeRules(blocked=why)
        outside = [n for n in nodes if not self.claims.may_allocate(n)]
        nodes = [n for n in nodes if n not in outside]
        if not nodes:
            config = self.claims.config
            return gpus, NodeRules(
                blocked="; ".join(nodepool.outside_reason(n, config) for n in outside)
            )
        term = (Requirement("metadata.name", "In", tuple(nodes), field=True),)
        return gpus, eligible.also(NodeRules(required=((term,),)), shared)

    def allocate(self, pod: ForeignPod, placement: WorkerPlacement) -> None:
        """Allocate the pod's claims on the placed node and reserve them for it, and
        join it to the claims it shares; raises `DraUnfit` when its devices there are
        gone meanwhile, or a shared claim is not on that node (the pod waits again)."""
        got = self._read(pod)
        if isinstance(got, str):
            raise DraUnfit(got)
        ref = {"resource": "pods", "name": pod.name, "uid": pod.uid}
        shared = dict(got.shared)
        if got.requests:
            shared.update(self._allocate(pod, placement, got.requests, set(shared)))
        for key, obj in sorted(shared.items()):
            self._join(key, obj, ref, placement.node)

    def _allocate(
        self,
        pod: ForeignPod,
        placement: WorkerPlacement,
        requests: list[dra.Request],
        shared: set[str],
    ) -> dict[str, Obj]:
        """Allocate the claims not in `shared` on the placed node, for the pod; returns
        those another pod allocated meanwhile (as read), which it shares instead."""
        if not self.claims.may_allocate(placement.node):
            raise DraUnfit(nodepool.outside_reason(placement.node, self.claims.config))
        state = self.claims.state()
        devices = [d for d in state.usage.inventory.devices if d.node == placement.node]
        gpus = state.nodes.get(placement.node)
        offered = dra.offered(gpus, state.foreign) if gpus is not None else []
        prefer = [offered[i].device for i in placement.gpus if i < len(offered)]
        classes = self.claims.device_classes()
        picks = dra.pick(requests, devices, classes, state.usage, prefer)
        if isinstance(picks, str):
            raise DraUnfit(f"node {placement.node}: {picks}")
        ref = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}
        mine, taken = [], {}
        for name in pod.dra_claims:
            key = f"{pod.namespace}/{name}"
            if key in shared:
                continue
            finalizer = {"metadata": {"finalizers": [claimobjects.FINALIZER]}}
            # The answer is the claim as it is now: another pod of this claim may have
            # allocated it since the cache was read (then this one shares it).
            now = self.kube.patch("resourceclaims", name, finalizer, pod.namespace, STRATEGIC_PATCH)
            if _allocated(now):
                taken[key] = now
                continue
            body = claimobjects.allocation(
                now,
                ref,
                placement.node,
                [(r.name, d.key, None) for r, d in picks if r.claim == key],
            )
            # Only over the claim as read: a pod sharing it may be allocating it too.
            body["metadata"] = {"resourceVersion": now["metadata"]["resourceVersion"]}
            try:
                self.claims.write_status(key, body)
            except ApiError as e:
                if e.status != 409:
                    raise
                raise DraUnfit(
                    f"ResourceClaim {key} changed while Shoal allocated it (another pod of "
                    "the claim?); the pod is placed again"
                ) from e
            mine.append(key)
        if mine:
            self.claims.verify(mine, placement.node)
        return taken

    def _join(self, key: str, obj: Obj, ref: Obj, node: str) -> None:
        """Append `ref` to the allocated claim's `reservedFor`, keeping every other
        consumer: the write carries the resourceVersion read, and a conflict reads the
        claim again (another consumer joined or went)."""
        namespace, name = key.split("/", 1)
        for _ in range(CONFLICT_RETRIES):
            if not _allocated(obj):
                raise DraUnfit(
                    f"ResourceClaim {key} is no longer allocated (its pods went and the "
                    "resourceclaim controller released it); the pod is placed again"
                )
            if not _selects(obj, node, self.claims.nodes(node)):
                raise DraUnfit(
                    f"ResourceClaim {key} is allocated for other nodes than {node}; the pod "
                    "is placed again, where the claim's devices are"
                )
            reserved = _reserved(obj)
            if any(r.get("uid") == ref["uid"] for r in reserved):
                return
            full = self._full(key, obj, str(ref["uid"]))
            if full:
                raise DraUnfit(full)
            body = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {"reservedFor": [*reserved, ref]},
            }
            try:
                self.kube.patch("resourceclaims/status", name, body, namespace)
                return
            except ApiError as e:
                if e.status == 404:
                    raise DraUnfit(f"ResourceClaim {key} is gone") from e
                if e.status != 409:
                    raise
            got = self.kube.get("resourceclaims", name, namespace)
            if got is None:
                raise DraUnfit(f"ResourceClaim {key} is gone")
            obj = got
        raise DraUnfit(
            f"ResourceClaim {key} kept changing while Shoal reserved it; the pod is placed again"
        )


def _selects(obj: Obj, node: str, node_obj: Obj | None) -> bool:
    """Does the allocated claim's nodeSelector select `node` (any node: none given)?"""
    rules = _selector_rules(obj)
    if rules is None:
        return True
    labels = ((node_obj or {}).get("metadata") or {}).get("labels") or {}
    target = Node(name=node, cpu_milli=0, memory_mib=0, labels=labels)
    return all(any(eligible.matches(t, target) for t in req) for req in rules.required)
