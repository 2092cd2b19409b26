"""What a foreign pod's volumes, device claims and pod-level constraints say about
where it may run (its nodeSelector, node affinity and tolerations are read as they are by
`placement.eligible.rules`).

A bound PersistentVolumeClaim's volume may be reachable from some nodes only (a local
disk, a zonal volume): its PersistentVolume's `nodeAffinity` becomes a required term of
the pod's `NodeRules`. What Shoal cannot place, it says so and leaves the pod pending
(`NodeRules.blocked`): a claim that is missing or not bound yet (a WaitForFirstConsumer
claim is bound by kube-scheduler's volume binding when it schedules the pod, which Shoal
does not do), DRA ResourceClaims (Shoal does not allocate devices yet), and required
inter-pod affinity or hard topology spread (Shoal places each foreign pod alone; their
preferred forms are only preferences and are ignored).

Claims are read on demand (a foreign pod with volumes is rare next to the pods it
schedules) and the answer kept for a while: long once bound (a volume's node affinity
does not change), briefly while the claim is pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.backends.base import BackendError
from scheduler.model import NodeRules
from scheduler.placement import eligible

Obj = dict[str, Any]
BOUND_TTL_S = 300.0
PENDING_TTL_S = 5.0


def unsupported(spec: Obj) -> str:
    """Why Shoal cannot bind a pod with this spec as its author meant ('' when it can)."""
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
            return (
                f"has a required {kind}: Shoal does not place pods by other pods' labels; "
                "use the preferred form or let kube-scheduler schedule this pod"
            )
    hard = [
        c
        for c in spec.get("topologySpreadConstraints") or []
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]
    if hard:
        return (
            "has topologySpreadConstraints with whenUnsatisfiable: DoNotSchedule, which "
            "Shoal does not evaluate; use ScheduleAnyway or let kube-scheduler schedule it"
        )
    return ""


def resource_claims(pod: Obj) -> tuple[str, ...]:
    """The ResourceClaims (DRA) a pod names: its own, or the one the resourceclaim
    controller made from its template (in `status.resourceClaimStatuses`; "" until then)."""
    made = {
        s.get("name"): s.get("resourceClaimName") or ""
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    return tuple(
        str(c.get("resourceClaimName") or made.get(c.get("name"), ""))
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
    )


def volume_claims(pod: Obj) -> tuple[str, ...]:
    """The PersistentVolumeClaims a pod mounts: named ones, and the claim of each
    generic ephemeral volume (`<pod>-<volume>`, made by the ephemeral volume controller)."""
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if (pvc := v.get("persistentVolumeClaim")) and pvc.get("claimName"):
            out.append(str(pvc["claimName"]))
        elif v.get("ephemeral"):
            out.append(f"{pod['metadata']['name']}-{v.get('name', '')}")
    return tuple(out)


class VolumeRules:
    """`NodeRules` from the claims a pod mounts, cached per claim."""

    def __init__(self, kube: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.clock = clock
        self._cache: dict[tuple[str, str], tuple[float, NodeRules | None]] = {}

    def rules(self, namespace: str, claims: Sequence[str]) -> NodeRules | None:
        out: NodeRules | None = None
        for claim in claims:
            out = eligible.also(out, self._claim(namespace, claim))
        return out

    def _claim(self, namespace: str, name: str) -> NodeRules | None:
        now = self.clock()
        hit = self._cache.get((namespace, name))
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            got, ttl = self._read(namespace, name)
        except BackendError as e:  # unreadable now (RBAC, API away): wait and say so
            got, ttl = NodeRules(blocked=f"persistentvolumeclaim {name}: {e}"), PENDING_TTL_S
        self._cache[(namespace, name)] = (now + ttl, got)
        return got

    def _read(self, namespace: str, name: str) -> tuple[NodeRules | None, float]:
        pvc = self.kube.get("persistentvolumeclaims", name, namespace)
        if pvc is None:
            return NodeRules(blocked=f'persistentvolumeclaim "{name}" not found'), PENDING_TTL_S
        volume = (pvc.get("spec") or {}).get("volumeName")
        if not volume or (pvc.get("status") or {}).get("phase") != "Bound":
            return NodeRules(blocked=self._unbound(pvc, name)), PENDING_TTL_S
        pv = self.kube.get("persistentvolumes", volume) or {}
        required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        return eligible.rules(None, affinity if required else None, None), BOUND_TTL_S

    def _unbound(self, pvc: Obj, name: str) -> str:
        cls = (pvc.get("spec") or {}).get("storageClassName")
        sc = self.kube.get("storageclasses", cls) if cls else None
        if (sc or {}).get("volumeBindingMode") == "WaitForFirstConsumer":
            return (
                f'persistentvolumeclaim "{name}" waits for its first consumer (storage class '
                f"{cls}, WaitForFirstConsumer): Shoal does not bind volumes; use a class with "
                "Immediate binding, or a claim bound beforehand"
            )
        return f'persistentvolumeclaim "{name}" is not bound yet'
