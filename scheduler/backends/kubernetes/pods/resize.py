"""Resizing a running attempt of an elastic job in place (`base.Resizable`).

A grow creates and binds the pods of the workers the attempt does not have yet, exactly
as the launch made the first ones (same names, labels, PodGroup, DRA claims or GPU
reservations; their env lists every host of the new size); the pods already there are
left alone. A shrink evicts just the named workers' pods with their grace period (the
Eviction API: a PodDisruptionBudget may hold one back, `workerpods`), each told why
(`shoal.dev/stop-reason: Resized`); the Service, the PodGroup (whose `minCount`
is the job's `min`) and the other workers stay. Both read the attempt's pods from the
API server, not the cache (a grow's pods may not be in it yet), and are idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client.objects import ensure
from scheduler.backends.kubernetes.pods import manifests
from scheduler.backends.kubernetes.pods.workerpods import WorkerPods

Obj = dict[str, Any]


def grow(pods: WorkerPods, req: base.LaunchRequest) -> None:
    """Create and bind `req.placements`' workers the attempt lacks. A worker whose pod of
    an earlier shrink is still going away (the same name) cannot be made yet: a
    transient `BackendError`, so the loop tries again later."""
    ns = pods.config.namespace_of(req.spec)
    stem = names.job_base(req.job_id, req.spec.name)
    with pods.lock:
        have = attempt_pods(pods, req.job_id, req.attempt)
        going = sorted(
            p.worker
            for p in req.placements
            if p.worker in have and have[p.worker]["metadata"].get("deletionTimestamp")
        )
        if going:
            raise base.StillStopping(
                f"attempt {req.attempt} of job {req.job_id}: worker(s) "
                f"{', '.join(map(str, going))} of an earlier size still going away"
            )
        new = tuple(p for p in req.placements if p.worker not in have)
        # A grow cut short before its binds: its repeat binds the pods it made.
        unbound = [have[p.worker] for p in req.placements if p.worker in have]
        unbound = [p for p in unbound if not (p.get("spec") or {}).get("nodeName")]
        if new:
            ensure(pods.kube, "services", manifests.service(req, stem, ns), req.job_id)
        made = pods.create(req, new) if new else []
        for pod in [*unbound, *made]:
            pods.binder.bind_if_ready(pod)
        if made:
            where = ", ".join(sorted({p.node for p in new}))
            pods.events.emit(
                made[0],
                str(base.StopReason.RESIZED),
                f"attempt {req.attempt} of job {req.job_id} grows to {len(req.placements)} "
                f"workers: {len(made)} new on {where}",
            )


def shrink(
    pods: WorkerPods, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
) -> None:
    """Evict these workers' pods with the grace period (one being deleted is left
    alone), then any GPU reservation that was the last share of (`release_if_unused`;
    the reconcile sweep releases one whose worker still runs out its grace). A DRA
    claim is owned by its pod: the garbage collector deletes it after the pod."""
    with pods.lock:
        if _waiting(pods, job_id, attempt, workers):
            return
        have = attempt_pods(pods, job_id, attempt)
        going = [have[w] for w in sorted(set(workers)) if w in have]
        used = {names.labels_of(p).get(names.RESERVATION) for p in going} - {None}
        for pod in going:
            pods.stop_pod(pod, grace_period_s, base.StopReason.RESIZED, "the job shrinks", job_id)
        for name in sorted(str(u) for u in used):
            pods.reservations.release_if_unused(name)


def _waiting(pods: WorkerPods, job_id: str, attempt: int, workers: Sequence[int]) -> bool:
    """Is every one of these workers' pods in the cache, its eviction refused by a PDB
    and waiting out its backoff? Then a repeat (the loop settles a shrink every cycle)
    has nothing to do yet: no LIST."""
    if not pods.evictions.any():
        return False
    found = {}
    for p in pods.pod_cache.items():
        labels = names.labels_of(p)
        if (
            names.annotations_of(p).get(names.JOB_ID) == job_id
            and labels.get(names.ATTEMPT) == str(attempt)
            and labels.get(names.WORKER_INDEX) is not None
        ):
            found[int(labels[names.WORKER_INDEX])] = p
    return all(w in found and pods.evictions.resting(found[w]) for w in workers)


def attempt_pods(pods: WorkerPods, job_id: str, attempt: int) -> dict[int, Obj]:
    """worker index -> its pod, of this attempt of the job (read from the API server)."""
    selector = f"{names.JOB}={names.label_value(job_id)},{names.ATTEMPT}={attempt}"
    out = {}
    for p in pods.listed(job_id, selector):
        if (index := names.labels_of(p).get(names.WORKER_INDEX)) is not None:
            out[int(index)] = p
    return out
