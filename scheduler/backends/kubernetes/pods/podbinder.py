"""Binding a pod to the node its annotations name, once it is ready to bind.

Shared by launches, foreign pods and the reconcile step: it remembers the pods this
process bound, since the pod cache may not show a binding yet and no pod is bound twice.
"""

from __future__ import annotations

from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.dra.draclaims import DraClaims
from scheduler.backends.kubernetes.reservations import shares
from scheduler.backends.kubernetes.view import status

Obj = dict[str, Any]


class PodBinder:
    def __init__(
        self,
        kube: Kube,
        config: KubeConfig,
        reservations: shares.Reservations,
        recorder: events.Recorder,
        claims: DraClaims | None = None,
    ) -> None:
        self.kube = kube
        self.claims = claims
        self.config = config
        self.reservations = reservations
        self.events = recorder
        self.bound: set[str] = set()  # pod uids this process bound (the cache may lag)

    def bind_if_ready(self, pod: Obj) -> bool:
        """Bind to the annotated node; a fraction first gets its reservation's UUID,
        and a worker whose GPUs a DRA driver serves its allocated claim (raises
        `DraUnfit` when no device there fits: the job's reason)."""
        meta = pod["metadata"]
        if pod["spec"].get("nodeName") or meta.get("uid") in self.bound:
            return True
        if status.gates(pod):  # the API server refuses it (a webhook gated our pod)
            return False
        ann, node = names.annotations_of(pod), names.annotations_of(pod).get(names.NODE, "")
        replica = bool(ann.get(names.GPU_REPLICA))  # the device plugin supplies the GPU
        if names.DRA_CLAIM in ann:
            if self.claims is None or not self.claims.allocate(pod):
                return False
        elif names.GPU_FRACTION in ann and not ann.get(names.GPU_UUID) and not replica:
            uuid = self.reservations.uuid(names.labels_of(pod).get(names.RESERVATION, ""))
            if not uuid:
                return False
            kind = self.config.share_cdi_kind  # the NVIDIA runtime in CDI mode resolves it
            ann_patch = {names.GPU_UUID: uuid, names.GPU_DEVICE: f"{kind}={uuid}" if kind else uuid}
            self.kube.patch(
                "pods",
                meta["name"],
                {"metadata": {"annotations": ann_patch}},
                meta["namespace"],
            )
        bound = self.kube.bind(meta["namespace"], meta["name"], node, meta.get("uid", ""))
        self.bound.add(meta.get("uid", ""))
        if bound:
            self.events.emit(
                pod,
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
            )
        return True
