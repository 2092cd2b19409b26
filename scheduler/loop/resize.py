"""Elastic jobs in the loop: the core's `Resize` decisions carried out, store first,
backend second (`apply_all`); what a crash between the two left, settled on the next
cycles (`settle`); the GPUs of a shrink's workers held until they are gone
(`leftovers`); and, on a backend that cannot resize, every job as rigid (`rigid`).

A grow records the new placements and a `Resized` event, then the backend starts the
new workers (torchrun agents that join the job's c10d rendezvous; the others re-form
the group with them). A shrink records the kept placements, then the backend stops the
removed workers (newest first, SIGTERM and their grace); the rest re-form without them.
Both backend calls are idempotent, so `settle` simply repeats them for a job whose
workers do not match its placements: one missing (a grow not carried out) or one past
its size still running (a shrink not carried out).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from scheduler import model
from scheduler.backends import base
from scheduler.loop import launching, transition
from scheduler.loop.context import Cycle
from scheduler.loop.enact import enact, taken
from scheduler.spec import Phase
from scheduler.store.live import LiveJob

log = logging.getLogger(__name__)

AttemptKey = tuple[str, int]


def apply_all(
    cycle: Cycle,
    resizes: Sequence[model.Resize],
    live: Mapping[str, LiveJob],
    wrote: list[LiveJob],
) -> list[str]:
    """Record each resize (one transaction), then have the backend start or stop the
    workers; returns the ids of the jobs resized. The jobs as written go to `wrote` (for
    the loop's cache); one job's trouble goes to `cycle.on_error`."""
    resizable = cycle.backend.capabilities().resizable
    if resizable is None:
        return []
    todo = []
    for r in resizes:
        lj = live.get(r.job_id)
        if lj is not None and lj.phase is Phase.RUNNING:
            why = r.reason + (f" (for {r.for_job})" if r.for_job else "")
            todo.append((r, lj, transition.resized(r.placements, why)))
    results = enact(cycle.db, cycle.backend, [(lj, t) for _, lj, t in todo], now=cycle.now)
    done = []
    for (r, lj, _), result in zip(todo, results, strict=True):
        if (job := taken(result, lj.id, "resize", cycle.on_error)) is None:
            continue
        wrote.append(job)
        try:
            _follow(cycle, resizable, r, lj)
        except Exception as exc:
            cycle.on_error(r.job_id, "resize", exc)
            continue
        done.append(lj.id)
    return done


def _follow(cycle: Cycle, resizable: base.Resizable, r: model.Resize, lj: LiveJob) -> None:
    """The backend follows a recorded resize of `lj` (as read before it): the removed
    workers stopped, or the new ones started."""
    kept = {p.worker for p in r.placements}
    removed = sorted(p.worker for p in lj.placements if p.worker not in kept)
    if removed:
        resizable.shrink(lj.id, lj.attempt, removed, r.grace_period_s)
    else:
        resizable.grow(launching.request_for(cycle, lj, r.placements))
    log.info("job %s: %s", lj.id, r.reason)


def settle(cycle: Cycle, lj: LiveJob, workers: Sequence[base.WorkerStatus]) -> None:
    """Finish what a resize left undone: start the workers of its placements that are
    missing after a grow, stop those past its size that still run after a shrink."""
    resizable = cycle.backend.capabilities().resizable
    if resizable is None or lj.resized_at is None or lj.phase is not Phase.RUNNING:
        return
    size = {p.worker for p in lj.placements}
    seen = {w.worker for w in workers if not w.vacated}  # an ended removed one: missing
    if size - seen:
        resizable.grow(launching.request_for(cycle, lj, lj.placements))
    # Past its size and still running, unless the backend says its shrink was carried out.
    past = sorted(
        w.worker for w in workers if w.worker not in size and w.holds_gpus and not w.removed
    )
    if past:
        resizable.shrink(lj.id, lj.attempt, past, lj.request.grace_period_s)


def leftovers(
    live: Sequence[LiveJob],
    attempts: Mapping[AttemptKey, Sequence[base.WorkerStatus]],
    now: float,
) -> list[model.RunningJob]:
    """The workers a shrink removed that still hold GPUs, per job as a stopping entry of
    its own (`split_from`: the first removed index), so nothing is placed on them yet."""
    out = []
    for lj in live:
        if not lj.request.elastic or lj.phase not in (Phase.SCHEDULED, Phase.RUNNING):
            continue
        size = {p.worker for p in lj.placements}
        gone = [
            w.placement
            for w in attempts.get((lj.id, lj.attempt), ())
            if w.worker not in size and w.holds_gpus
        ]
        if gone:
            first = min(p.worker for p in gone)
            out.append(
                model.RunningJob(
                    lj.request,
                    tuple(gone),
                    now,
                    stopping=True,
                    attempt=lj.attempt,
                    split_from=first,
                )
            )
    return out


def rigid(snapshot: model.Snapshot) -> model.Snapshot:
    """The snapshot with every job rigid (a backend that cannot resize): a pending one
    at its gang, a running one at the size it has."""

    def fixed(job: model.JobRequest, size: int) -> model.JobRequest:
        return dataclasses.replace(job, workers=size, max_workers=0) if job.elastic else job

    return dataclasses.replace(
        snapshot,
        running=tuple(
            dataclasses.replace(r, job=fixed(r.job, max(r.job.workers, len(r.placements))))
            for r in snapshot.running
        ),
        pending=tuple(fixed(j, j.workers) for j in snapshot.pending),
    )
