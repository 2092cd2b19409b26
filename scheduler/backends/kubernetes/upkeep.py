"""The backend's background upkeep: one reconcile pass over the pod cache.

It binds fractional workers once their GPU's UUID is known, finishes launches a crash
interrupted, reports failures as Events, turns sharing off on a node whose share saw no
GPU (`shares`), releases unused GPU reservations and deletes finished jobs' objects
after `finished_ttl_s`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.backends.kubernetes.client.objects import delete_job_objects
from scheduler.backends.kubernetes.foreignpods.foreign import ForeignBindings
from scheduler.backends.kubernetes.pods.handle import Handle
from scheduler.backends.kubernetes.pods.workerpods import WorkerPods
from scheduler.backends.kubernetes.view import inventory, status

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Upkeep:
    def __init__(self, handle: Handle, *, workers: WorkerPods, foreign: ForeignBindings) -> None:
        h = handle
        self.kube, self.config, self.pod_cache, self.index = h.kube, h.config, h.pod_cache, h.index
        self.reservations, self.events, self.binder = h.reservations, h.recorder, h.binder
        self.lock = h.lock
        self.workers, self.foreign = workers, foreign
        self.reported: set[str] = set()  # pod uids whose failure has an Event
        self.finished_since: dict[str, float] = {}
        self.refused: dict[str, str] = {}  # pod uid -> why its binding was refused

    def reconcile(self) -> None:
        """One pass (the caller checks that this replica leads)."""
        with self.lock:
            pods = self.pod_cache.items()
            for pod in pods:
                if not status.is_worker(pod) or pod["metadata"].get("deletionTimestamp"):
                    continue
                uid = pod["metadata"].get("uid", "")
                if names.annotations_of(pod).get(names.JOB_ID) in self.workers.launching:
                    continue  # the launch binds its own pods
                if not pod["spec"].get("nodeName") and uid not in self.binder.bound:
                    self._bind_unbound(pod, uid)
                elif (pod.get("status") or {}).get("phase") == "Failed":
                    self._report_failure(pod)
            self.reservations.sweep(pods)
            self.workers.nominees.sweep(pods)
            self._report_reservation_problems(pods)
            self.reservations.shares_without_gpu(p for p in pods if status.is_worker(p))
            self._expire_finished(pods)
            self.binder.bound &= {p["metadata"].get("uid", "") for p in pods}
            uids = {p["metadata"].get("uid", "") for p in pods}
            self.refused = {k: v for k, v in self.refused.items() if k in uids}
            jobs = {names.annotations_of(p).get(names.JOB_ID, "") for p in pods}
            self.workers.stopped &= jobs
            where = self.workers.where
            self.workers.where = {
                j: ns for j, ns in where.items() if j in jobs or j in self.workers.launching
            }
            self.foreign.forget_failures({f.job_id for _, f in self.index.foreign_pending()})

    def _bind_unbound(self, pod: Obj, uid: str) -> None:
        """A fraction's UUID came, or a crash interrupted a launch. The cache may lag
        behind our own binding: read the pod again first. One pod's refused binding is
        that pod's (its worker fails, retryable), not the end of the pass for the rest."""
        try:
            live = self.kube.get("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])
            if live and not live["metadata"].get("deletionTimestamp"):
                self.binder.bind_if_ready(live)
        except ApiError as e:
            if e.transient:
                raise
            log.warning("binding %s refused: %s", pod["metadata"]["name"], e)
            self.refused[uid] = f"binding refused: {e}"

    def _report_failure(self, pod: Obj) -> None:
        uid = pod["metadata"].get("uid", pod["metadata"]["name"])
        if uid in self.reported:
            return
        self.reported.add(uid)
        w = status.worker_status(pod)
        self.events.emit(
            pod,
            "WorkerFailed",
            f"worker {w.worker} of job {w.job_id} failed (exit code {w.exit_code}): {w.message}",
            events.WARNING,
        )

    def _report_reservation_problems(self, pods: list[Obj]) -> None:
        broken = self.reservations.problems(pods)
        for pod in pods:
            name, uid = pod["metadata"]["name"], pod["metadata"].get("uid", "")
            if name in broken and f"res:{uid}" not in self.reported:
                self.reported.add(f"res:{uid}")
                self.events.emit(pod, "ReservationFailed", broken[name], events.WARNING)

    def _expire_finished(self, pods: list[Obj]) -> None:
        ttl = self.config.finished_ttl_s
        if ttl is None:
            return
        by_job: dict[str, list[Obj]] = {}
        for p in pods:
            if status.is_worker(p) and names.is_managed(p):
                by_job.setdefault(names.annotations_of(p)[names.JOB_ID], []).append(p)
        now = time.monotonic()
        for job, group in by_job.items():
            if any((p.get("status") or {}).get("phase") not in inventory.TERMINAL for p in group):
                self.finished_since.pop(job, None)
                continue
            since = self.finished_since.setdefault(job, now)
            if now - since >= ttl:
                log.info("deleting finished job %s's objects (ttl %.0fs)", job, ttl)
                for p in group:
                    self.kube.delete("pods", p["metadata"]["name"], p["metadata"]["namespace"])
                for ns in self.workers.namespaces_of(job, group):
                    delete_job_objects(self.kube, ns, job, gangs=self.workers.gangs_served)
                self.finished_since.pop(job, None)
