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
"""

from __future__ import annotations

from scheduler.backends.kubernetes import claimobjects, dra, nodepool
from scheduler.backends.kubernetes.api import STRATEGIC_PATCH, Kube
from scheduler.backends.kubernetes.draclaims import DraClaims, DraUnfit
from scheduler.backends.kubernetes.status import ForeignPod
from scheduler.model import NodeRules, Requirement, WorkerPlacement


class ForeignClaims:
    def __init__(self, kube: Kube, claims: DraClaims) -> None:
        self.kube, self.claims = kube, claims

    def _requests(self, pod: ForeignPod) -> list[dra.Request] | str:
        state = self.claims.state()
        out: list[dra.Request] = []
        for name in pod.dra_claims:
            obj = state.claims.get(f"{pod.namespace}/{name}") if name else None
            if obj is None:
                made = f'"{name}" is not there' if name else "is not made from its template yet"
                return f"ResourceClaim {made} (pod {pod.namespace}/{pod.name})"
            if (obj.get("status") or {}).get("allocation"):
                return f"ResourceClaim {pod.namespace}/{name} is allocated already"
            got = dra.requests_of(obj)
            if isinstance(got, str):
                return got
            out.extend(got)
        return out

    def request(self, pod: ForeignPod) -> tuple[float, NodeRules]:
        """(GPUs its claims take, the nodes whose devices satisfy them all, or why none)."""
        requests = self._requests(pod)
        if isinstance(requests, str):
            return 0.0, NodeRules(blocked=requests)
        state = self.claims.state()
        classes = self.claims.device_classes()
        nodes, why = dra.nodes_for(requests, state.usage.inventory, classes, state.usage)
        gpu_classes = (self.claims.config.dra_gpu_class,)
        gpus = float(sum(r.count for r in requests if r.device_class in gpu_classes))
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
        return gpus, NodeRules(required=((term,),))

    def allocate(self, pod: ForeignPod, placement: WorkerPlacement) -> None:
        """Allocate the pod's claims on the placed node and reserve them for it; raises
        `DraUnfit` when its devices there are gone meanwhile (the pod waits again)."""
        requests = self._requests(pod)
        if isinstance(requests, str):
            raise DraUnfit(requests)
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
        for name in pod.dra_claims:
            key = f"{pod.namespace}/{name}"
            obj = state.claims[key]
            mine = [(r.name, d.key, None) for r, d in picks if r.claim == key]
            finalizer = {"metadata": {"finalizers": [claimobjects.FINALIZER]}}
            self.kube.patch("resourceclaims", name, finalizer, pod.namespace, STRATEGIC_PATCH)
            body = claimobjects.allocation(obj, ref, placement.node, mine)
            self.claims.write_status(key, body)
        self.claims.verify([f"{pod.namespace}/{n}" for n in pod.dra_claims], placement.node)
