"""Reservation pods: how fractional workers share one physical GPU.

A reservation pod per shared (node, GPU index) requests `nvidia.com/gpu: 1`, so the
device plugin allocates a real GPU to it and no other pod gets that GPU; its `shoal
reserve` process writes the GPU's UUID into the pod's `shoal.dev/gpu-uuid` annotation.
Fractional workers request no GPU, carry the label `shoal.dev/reservation=<pod>`, and
are bound once that UUID is known. A reservation is deleted when no live worker uses it
any more (at once from `stop`, and by the periodic sweep for any left behind). Sharing
goes off on a node whose reservation found no GPU, or whose share checked in and saw none
(`scheduler.worker.checkin`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError, Unavailable
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.reservations import holds, reservationpod, reserve
from scheduler.backends.kubernetes.view import inventory, status
from scheduler.model import RunningJob

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def _age_s(obj: Obj) -> float:
    return _since_s(obj["metadata"].get("creationTimestamp"))


def _since_s(stamp: object) -> float:
    """Seconds since an API timestamp (0 without one)."""
    if not stamp:
        return 0.0
    t = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return (dt.datetime.now(dt.UTC) - t).total_seconds()


def no_gpu_message(pod: Obj) -> str | None:
    """What the reserver said when it found no GPU (exit `reserve.NO_GPU_EXIT`, now or in
    its last run: it restarts), or None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            done = state.get("terminated") or {}
            if done.get("exitCode") == reserve.NO_GPU_EXIT:
                return str(done.get("message") or "").strip() or "no GPU UUID found"
    return None


def unshareable(pod: Obj, config: KubeConfig) -> str | None:
    """Why a share could not reach the reservation's GPU, from how the device plugin
    handed the GPU to the reservation (`reserve.delivery`), or None. Under a CDI
    strategy (cdi-annotations, cdi-cri) the container runtime injects a device only into
    a container that requested it; a share requests none and is handed its GPU only by
    the NVIDIA Container Runtime reading NVIDIA_VISIBLE_DEVICES: without a worker
    RuntimeClass naming that runtime, the share would see no GPU."""
    if names.annotations_of(pod).get(names.GPU_DELIVERY) != "cdi" or config.runtime_class:
        return None
    return (
        f"GPU reservation {pod['metadata']['name']} got its GPU by CDI (no "
        "NVIDIA_VISIBLE_DEVICES in its container: the device plugin's cdi-annotations or "
        "cdi-cri strategy), and a share, which requests no nvidia.com/gpu, is handed its "
        "GPU only by the NVIDIA Container Runtime: set workerRuntimeClassName to its "
        "RuntimeClass (e.g. nvidia; in CDI mode with reservations.shareCdiKind)"
    )


class Reservations:
    def __init__(self, kube: Kube, config: KubeConfig, recorder: events.Recorder) -> None:
        self.kube, self.config, self.events = kube, config, recorder
        # node -> (why sharing cannot work there, until when (monotonic) it is excluded)
        self._no_gpu: dict[str, tuple[str, float]] = {}
        # A share on its way, not yet in the pod cache: its pod's cache key ->
        # (its reservation, since when (monotonic)); that reservation is not idle (`holds`).
        self._claims: dict[str, tuple[str, float]] = {}

    def excluded(self) -> dict[str, str]:
        """Nodes where a reservation found no GPU, and why (until `sharing_retry_s`):
        they offer no fractions (`Node.no_sharing`), their whole GPUs stay offered."""
        now = time.monotonic()
        self._no_gpu = {n: v for n, v in self._no_gpu.items() if v[1] > now}
        return {n: why for n, (why, _) in self._no_gpu.items()}

    def holds(
        self,
        reservations: list[tuple[Obj, int]],
        share_of: Callable[[str], str | None],
        gpu_counts: Mapping[str, int],
    ) -> list[RunningJob]:
        """The GPUs reservation pods hold beyond their shares (`holds.holds`), from
        (pod, shares not finished on it) and each offered node's GPU count. A claim ends
        once the cache shows its share (`share_of`: a cached pod's reservation), or after
        `holds.CLAIM_S`."""
        now = time.monotonic()
        self._claims = {
            k: (res, t)
            for k, (res, t) in self._claims.items()
            if share_of(k) != res and now - t < holds.CLAIM_S
        }
        claimed = {res: t for res, t in self._claims.values()}
        return holds.holds(reservations, claimed, gpu_counts)

    def ensure(self, node: str, gpu: int, share: str | None = None) -> Obj:
        """The reservation pod for (node, gpu), created and bound if need be. `share`:
        the cache key of the share pod on its way to it (it is not idle: `holds`)."""
        body = reservationpod.reservation_pod(node, gpu, self.config)
        name, ns = body["metadata"]["name"], self.config.reservation_namespace
        if share is not None:
            self._claims[share] = (name, time.monotonic())
        try:
            pod = self.kube.create("pods", body, ns)
        except ApiError as e:
            if e.status != 409:
                raise
            pod = self._existing(node, gpu)
        if not (pod.get("spec") or {}).get("nodeName") and self.kube.bind(
            ns, name, node, pod["metadata"].get("uid", "")
        ):
            self.events.emit(pod, "Scheduled", f"Reserved GPU {gpu} of {node} for shared use")
        return pod

    def _existing(self, node: str, gpu: int) -> Obj:
        name = names.reservation_name(node, gpu)
        found = self.kube.get("pods", name, self.config.reservation_namespace)
        if found is None:  # deleted in between: make it again
            return self.ensure(node, gpu)
        if not names.is_reservation(found):
            raise ApiError(409, "Conflict", f"pod {name} exists and is not Shoal's")
        if found["metadata"].get("deletionTimestamp"):
            # The last one is still going away (its GPU still held): launch later.
            raise Unavailable(503, "Terminating", f"GPU reservation {name} is still terminating")
        return found

    def problems(self, pods: list[Obj]) -> dict[str, str]:
        """reservation name -> why the shares on it cannot run: it failed or was evicted
        (the GPU is no longer held), or it reported no GPU UUID within
        `reservation_uuid_timeout_s` (image pull failing, no GPU, crash loop). Their shares
        are then failed workers (retried without using up backoffLimit); the reservation
        goes with its last share and the next placement makes a new one. One that found
        no GPU at all (`reserve.NO_GPU_EXIT`), or whose GPU a share could not reach
        (`unshareable`), also turns off sharing on its node (`excluded`)."""
        out = {}
        timeout = self.config.reservation_uuid_timeout_s
        for pod in pods:
            if not names.is_reservation(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            name, st = pod["metadata"]["name"], pod.get("status") or {}
            no_gpu = no_gpu_message(pod)
            if no_gpu is not None:
                self._exclude(
                    pod,
                    f"GPU reservation {name} found no GPU ({no_gpu}), so the device "
                    "plugin's GPU does not reach containers here (check the runtime, "
                    "workerRuntimeClassName or reservations.runtimeClassName)",
                )
                out[name] = f"GPU reservation {name} found no GPU: {no_gpu}"
            elif (why := unshareable(pod, self.config)) is not None:
                self._exclude(pod, why)
                out[name] = why
            elif st.get("phase") in inventory.TERMINAL:
                why = ": ".join(x for x in (st.get("reason"), st.get("message")) if x)
                out[name] = f"GPU reservation {name} {str(st.get('phase')).lower()}" + (
                    f" ({why})" if why else ""
                )
            elif not names.annotations_of(pod).get(names.GPU_UUID) and _age_s(pod) > timeout:
                out[name] = f"GPU reservation {name} reported no GPU UUID within {timeout:.0f}s"
        return out

    def shares_without_gpu(self, workers: Iterable[Obj]) -> None:
        """No sharing on the node of a share whose check-in saw no GPU
        (`status.share_check_failure`), until `sharing_retry_s` after it exited: a failed
        share stays in the cache for `finished_ttl_s`, and must not turn sharing off
        again once the retry time has passed (nor after a restart)."""
        for pod in workers:
            blind = status.share_check_failure(pod)
            if blind is None:
                continue
            said, finished = blind
            left = self.config.sharing_retry_s - max(0.0, _since_s(finished))
            if left > 0:
                meta = pod["metadata"]
                who = f"{meta.get('namespace')}/{meta['name']}"
                self._exclude(pod, f"its share {who}: {said}", left)

    def _exclude(self, pod: Obj, why: str, for_s: float | None = None) -> None:
        """No sharing on the pod's node, for `why`, for `for_s` (`sharing_retry_s`)."""
        node = names.annotations_of(pod).get(names.NODE) or pod["spec"].get("nodeName")
        if node and node not in self._no_gpu:
            log.warning("node %s: no GPU sharing: %s", node, why)
            self._no_gpu[node] = (
                f"GPU sharing is off on {node}: {why}; whole GPUs are still offered; "
                f"sharing is tried again after {self.config.sharing_retry_s:.0f}s",
                time.monotonic() + (self.config.sharing_retry_s if for_s is None else for_s),
            )

    def uuid(self, name: str) -> str | None:
        """The GPU UUID the reservation reported, or None while it has not yet (or when
        a share could not reach that GPU: `unshareable`)."""
        pod = self.kube.get("pods", name, self.config.reservation_namespace)
        if pod is None or unshareable(pod, self.config) is not None:
            return None
        return names.annotations_of(pod).get(names.GPU_UUID)

    def release_if_unused(self, name: str, min_age_s: float = 0.0, ns: str | None = None) -> bool:
        """Delete the reservation when no worker that still holds resources uses it
        (a worker being deleted still does: its processes may still run on the GPU).
        `ns`: where it is, if not the configured namespace (one made before a change)."""
        ns = ns or self.config.reservation_namespace
        res = self.kube.get("pods", name, ns)
        if res is None or not names.is_reservation(res) or _age_s(res) < min_age_s:
            return False
        users, _ = self.kube.list("pods", None, labels=f"{names.RESERVATION}={name}")
        if any((u.get("status") or {}).get("phase") not in inventory.TERMINAL for u in users):
            return False
        log.info("releasing GPU reservation %s: no share left", name)
        return self.kube.delete("pods", name, ns, grace_period_s=5)

    def sweep(self, pods: list[Obj]) -> None:
        """Release every reservation no cached worker uses (confirmed with a live list)."""
        used = {
            names.labels_of(p).get(names.RESERVATION)
            for p in pods
            if (p.get("status") or {}).get("phase") not in inventory.TERMINAL
        }
        for pod in pods:
            name = pod["metadata"]["name"]
            if (
                names.is_reservation(pod)
                and name not in used
                and not pod["metadata"].get("deletionTimestamp")
            ):
                self.release_if_unused(
                    name, self.config.reservation_grace_s, pod["metadata"].get("namespace")
                )
