"""Launching and stopping a job's worker pods (and their Service, hostfile, reservations).

`WorkerPods` holds the jobs `stop` has stopped, so that the loop's repeated stop of a
draining attempt costs no API call while the pod cache shows nothing left to stop.

Stops Shoal decides for another job's sake (`EVICTED`: a preemption or reclaim, a
shrink, the rest of a broken gang) go through the Eviction API, so PodDisruptionBudgets
are honoured: a refused eviction leaves the pod running, says so (a Warning event on
the pod; the loop reads `disruption.Evictions.blocked`) and is tried again after a
backoff. It never ends in a delete: the job's owner relaxes the PDB, or deletes. Stops
the job's owner asked for (a cancel, maxRuntime) and Shoal's own clean-up delete.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.apierrors import ApiError, DisruptionBlocked
from scheduler.backends.kubernetes.client.objects import (
    delete_job_objects,
    ensure,
    graceful,
    patch_quietly,
)
from scheduler.backends.kubernetes.dra.draclaims import NodeOffer
from scheduler.backends.kubernetes.pods import disruption, gangs, manifests, objectmeta, workerpod
from scheduler.backends.kubernetes.pods.handle import Handle
from scheduler.backends.kubernetes.pods.nominees import Nominees
from scheduler.backends.kubernetes.reservations import fractioncharge
from scheduler.backends.kubernetes.view import inventory
from scheduler.model import WorkerPlacement
from scheduler.spec import Framework

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# Stops for another job's sake, or the gang's: evicted, so PDBs are honoured.
EVICTED = frozenset({base.StopReason.PREEMPTED, base.StopReason.RESIZED, base.StopReason.FAILED})
OWNERS = frozenset({base.StopReason.CANCELLED, base.StopReason.MAX_RUNTIME})  # deleted


class WorkerPods:
    def __init__(
        self,
        handle: Handle,
        *,
        dra: Callable[[str], NodeOffer | None] = lambda node: None,
        evictions: disruption.Evictions | None = None,
        nodes: Callable[[str], Obj | None] = lambda name: None,
    ) -> None:
        h = handle
        self.kube, self.config, self.pod_cache, self.index = h.kube, h.config, h.pod_cache, h.index
        self.reservations, self.events, self.binder = h.reservations, h.recorder, h.binder
        self.lock, self.mps_replicas = h.lock, h.mps_replicas
        self.dra = dra  # what a DRA driver offers on a node (None: the device plugin)
        self.gangs_served = h.config.workloads  # False once the API said it has no Workloads
        self.stopped: set[str] = set()  # jobs stop() has stopped (see stop)
        # Jobs whose launch runs now, on whatever thread: their pods are the launch's
        # to bind (the upkeep leaves them alone).
        self.launching: set[str] = set()
        self.where: dict[str, str] = {}  # job -> its namespace, for those launched here
        self.evictions = evictions or disruption.Evictions()
        self.nominees = Nominees(h.kube, h.config)  # rooms kept for preemptors (swept by upkeep)
        # Nodes advertise shoal.dev/gpu-milli, which a reservation's shares request.
        self.charge = fractioncharge.Advertiser(h.kube, nodes)

    def launch(self, request: base.LaunchRequest) -> None:
        """Make and bind the attempt's objects. Launches of different jobs may run at
        once (`launchpool`; a stop of the job cancels its launch first): the lock is
        held through a launch only where a fraction takes a GPU reservation, which a
        stop of another job could otherwise release before its pod exists."""
        ns, req = self.config.namespace_of(request.spec), request
        stem = names.job_base(req.job_id, req.spec.name)
        offers = {p.node: self.dra(p.node) for p in req.placements}
        reserves = any(
            objectmeta.is_fractional(p) and offers[p.node] is None for p in req.placements
        )
        with self.lock if reserves else contextlib.nullcontext():
            with self.lock:
                self.stopped.discard(req.job_id)
                self.launching.add(req.job_id)
            try:
                self._launch(req, stem, ns)
            finally:
                with self.lock:
                    self.launching.discard(req.job_id)

    def _launch(self, req: base.LaunchRequest, stem: str, ns: str) -> None:
        ensure(self.kube, "services", manifests.service(req, stem, ns), req.job_id)
        if req.spec.framework is Framework.MPI:
            body = manifests.hostfile(req, stem, ns, hosts_of(req, stem, ns))
            ensure(self.kube, "configmaps", body, req.job_id)
        pods = self.create(req, req.placements)
        for pod in pods:
            self.binder.bind_if_ready(pod)
        if pods:
            where = ", ".join(sorted({p.node for p in req.placements}))
            self.events.emit(
                pods[0],
                "Launched",
                f"attempt {req.attempt} of job {req.job_id}: {len(pods)} worker(s) on {where}",
            )

    def create(self, req: base.LaunchRequest, placements: Sequence[WorkerPlacement]) -> list[Obj]:
        """Create (or adopt) the pods of `placements`, workers of `req`'s attempt at the
        size `req.placements` says (their env lists every worker's host), in the gang's
        PodGroup, with the GPU reservations their fractions need; not yet bound."""
        ns = self.where[req.job_id] = self.config.namespace_of(req.spec)
        stem = names.job_base(req.job_id, req.spec.name)
        hosts = hosts_of(req, stem, ns)
        group = self._ensure_gang(req, stem, ns)
        offers = {p.node: self.dra(p.node) for p in placements}
        replica = {p.worker: self.mps_replicas(p.node) > 0 for p in placements}
        for p in placements:
            frac = objectmeta.is_fractional(p) and not replica[p.worker]
            if frac and offers[p.node] is None:
                with self.lock:
                    self.charge.ensure(p.node)
                    share = f"{ns}/{names.pod_name(stem, req.attempt, p.worker)}"
                    self.reservations.ensure(p.node, p.gpus[0], share)
        pods = []
        for p in placements:
            offer = offers[p.node]
            body = workerpod.worker_pod(
                req,
                p,
                stem,
                ns,
                hosts,
                self.config,
                replica=replica[p.worker] and offer is None,
                dra=offer.enforcement if offer is not None else None,
            )
            if group:
                gangs.join(body, group)
            pods.append(ensure(self.kube, "pods", body, req.job_id))
        return pods

    def _ensure_gang(self, req: base.LaunchRequest, stem: str, ns: str) -> str | None:
        """A multi-worker attempt's Workload and PodGroup (`gangs`); their name. Where
        the API is not served (before 1.37, or without GenericWorkload) gangs go
        without them, said once in the log."""
        if not (self.gangs_served and gangs.is_gang(req)):
            return None
        try:
            ensure(self.kube, "workloads", gangs.workload(req, stem, ns), req.job_id)
        except ApiError as e:
            if e.status != 404:
                raise
            log.warning("Workloads (scheduling.k8s.io/v1beta1) are not served: %s", e)
            self.gangs_served = False
            return None
        ensure(self.kube, "podgroups", gangs.pod_group(req, stem, ns), req.job_id)
        return names.group_name(stem, req.attempt)

    def stop(self, job_id: str, grace_period_s: float, *, reason: str = "Stopped") -> None:
        """See `KubernetesBackend.stop`."""
        with self.lock:
            # A pod whose eviction a PDB refused waits out its backoff (no LIST, no
            # eviction, each cycle), unless this stop is the owner's: a delete.
            owner = reason in OWNERS
            if job_id in self.stopped and not self._alive_in_cache(job_id, owner):
                return
            self.stopped.add(job_id)
            pods = self._job_pods(job_id)
            used = {names.labels_of(p).get(names.RESERVATION) for p in pods} - {None}
            for pod in pods:
                if reason == base.StopReason.PREEMPTED:
                    self.nominees.hold(pod)  # before its room starts to free
                self.stop_pod(pod, grace_period_s, reason, "stopping worker", job_id)
            for ns in self.namespaces_of(job_id, pods):
                delete_job_objects(self.kube, ns, job_id, gangs=self.gangs_served)
            self.where.pop(job_id, None)
            for name in sorted(str(u) for u in used):
                self.reservations.release_if_unused(name)

    def stop_pod(
        self, pod: Obj, grace_period_s: float, reason: str, what: str, job_id: str = ""
    ) -> None:
        """Say why on the pod (`shoal.dev/stop-reason`, and `shoal.dev/preempted` for a
        preemption: files in it), as an Event too, then evict it (`EVICTED` reasons) or
        delete it, with the grace period; one already being deleted is left alone. A
        repeat keeps the first stop's reason (the orphan sweep repeats a preemption as
        `Stopped`), unless it is the owner's (a cancel, maxRuntime): that deletes."""
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            return
        first = names.annotations_of(pod).get(names.STOP_REASON)
        if first is not None and reason not in OWNERS:
            reason = first
        else:
            marks = {names.STOP_REASON: str(reason)}
            if reason == base.StopReason.PREEMPTED:
                marks[names.PREEMPTED] = "1"
            patch_quietly(self.kube, pod, marks)
            self.events.emit(
                pod,
                reason,
                f"{what} (grace {grace_period_s:.0f}s)",
                events.WARNING if reason == base.StopReason.PREEMPTED else events.NORMAL,
            )
        if reason in EVICTED:
            self._evict(pod, grace_period_s, job_id)
        else:
            self.kube.delete(
                "pods", meta["name"], meta["namespace"], grace_period_s=graceful(grace_period_s)
            )

    def _evict(self, pod: Obj, grace_period_s: float, job_id: str) -> None:
        """Evict `pod`; a PDB's refusal is recorded (`Evictions`) and said once per
        message as a Warning event on the pod; the pod runs on."""
        meta = pod["metadata"]
        if self.evictions.resting(pod):
            return
        job_id = job_id or names.annotations_of(pod).get(names.JOB_ID, "")
        try:
            self.kube.evict(
                meta["namespace"], meta["name"], graceful(grace_period_s), meta.get("uid", "")
            )
        except DisruptionBlocked as e:
            r = self.evictions.refused(pod, job_id, e.budget)
            message = f"waiting for PodDisruptionBudget {r.message}"
            self.events.emit(pod, "EvictionBlocked", message, events.WARNING, key=r.message)
            log.info("eviction of %s/%s: %s", meta["namespace"], meta["name"], message)
            return
        self.evictions.passed(pod)

    def _alive_in_cache(self, job_id: str, waiting_counts: bool = False) -> bool:
        """Does the cache show a pod of `job_id` not yet deleted and not finished (one
        whose refused eviction waits out its backoff only with `waiting_counts`)?"""
        key = self.index.key_of_job(job_id)  # an adopted foreign pod
        foreign = self.pod_cache.get(key) if key is not None else None
        for p in [foreign] if foreign is not None else self.pod_cache.items():
            ann = names.annotations_of(p)
            if (
                (foreign is not None or ann.get(names.JOB_ID) == job_id)
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in inventory.TERMINAL
                and (waiting_counts or not self.evictions.resting(p))
            ):
                return True
        return False

    def namespaces_of(self, job_id: str, pods: Sequence[Obj] = ()) -> tuple[str, ...]:
        """Where `job_id`'s objects are: where this process launched it, else where its
        `pods` (or the cache's) are, else every namespace Shoal runs jobs in (a stop
        after a restart, of a job whose pods are all gone: its Service may be left)."""
        if (ns := self.where.get(job_id)) is not None:
            return (ns,)
        found = {p["metadata"].get("namespace", "") for p in pods}
        if not found:
            found = {
                p["metadata"].get("namespace", "")
                for p in self.pod_cache.items()
                if names.annotations_of(p).get(names.JOB_ID) == job_id
            }
        return tuple(sorted(found)) or self.config.job_namespaces

    def _job_pods(self, job_id: str) -> list[Obj]:
        key = self.index.key_of_job(job_id)
        cached = self.pod_cache.get(key) if key is not None else None
        if cached is not None:  # an adopted foreign pod: read it fresh
            meta = cached["metadata"]
            pod = self.kube.get("pods", meta["name"], meta.get("namespace", ""))
            return [pod] if pod else []
        return self.listed(job_id, f"{names.JOB}={names.label_value(job_id)}")

    def listed(self, job_id: str, selector: str) -> list[Obj]:
        """The pods of `job_id` that `selector` picks, read from the API server in each
        of its namespaces."""
        out: list[Obj] = []
        for ns in self.namespaces_of(job_id):
            pods, _ = self.kube.list("pods", ns, labels=selector)
            out.extend(p for p in pods if names.annotations_of(p).get(names.JOB_ID) == job_id)
        return out


def hosts_of(req: base.LaunchRequest, stem: str, ns: str) -> list[str]:
    """Every worker's stable DNS name (through the job's headless Service), by index."""
    return [
        f"{names.pod_name(stem, req.attempt, p.worker)}.{stem}.{ns}.svc"
        for p in sorted(req.placements, key=lambda p: p.worker)
    ]
