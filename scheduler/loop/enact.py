"""The one applier of a life-cycle `Transition`: store first, crash point, backend last.

Every change the loop makes to a job goes through `enact` (a placement recorded as a new
attempt, a launch the cluster refused, a retry, a preemption, a phase that follows its
workers): the transition's event, then its placement or phase writes in order (each
against the version the previous one returned, each followed by its crash point,
`scheduler.loop.faults`), then its pending reason, then the backend's stop and its
crash point. A crash after a write leaves workers their job no longer holds, which the
next cycle's orphan sweep stops; a crash before it leaves the old phase, which the next
cycle decides again. A version conflict (the job moved on meanwhile) propagates before
the backend is touched.
"""

from __future__ import annotations

import logging

from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import faults
from scheduler.loop.backoff import Backoff
from scheduler.loop.transition import Transition
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)


def enact(
    db: LiveStore,
    backend: base.ClusterBackend,
    job_id: str,
    version: int,
    transition: Transition,
    *,
    now: float,
    backoff: Backoff | None = None,
    retries: Backoff | None = None,
) -> int:
    """Carry `transition` out for `job_id` at `version`; returns the job's new version.
    `backoff`/`retries` receive the transition's `hold_launch`/`hold_retry`."""
    at = as_datetime(now)
    t = transition
    if t.event is not None:
        db.append_event(
            job_id=job_id,
            kind=t.event.kind,
            reason=t.event.reason,
            message=t.event.message,
            now=at,
        )
    if t.place is not None:
        version = db.record_placement(
            job_id=job_id,
            expected_version=version,
            placements=t.place.placements,
            attempt=t.place.attempt,
            now=at,
        )
        if t.place.fault is not None:
            faults.point(t.place.fault)
    for w in t.writes:
        version = db.set_phase(
            job_id=job_id,
            expected_version=version,
            phase=w.phase,
            reason=w.reason,
            message=w.message,
            count_restart=w.count_restart,
            now=at,
        )
        if w.fault is not None:
            faults.point(w.fault)
    if t.pending is not None:
        version = db.set_pending_reason(job_id=job_id, reason=t.pending, expected_version=version)
    # In memory only (a crash forgets them anyway), once the store took the change.
    if t.hold_retry and retries is not None:
        retries.hold(job_id, now)
    if t.hold_launch and backoff is not None:
        backoff.hold(job_id, now)
    if t.stop is not None:
        stop_quietly(backend, job_id, t.stop.grace_s, reason=t.stop.reason)
        if t.stop.fault is not None:
            faults.point(t.stop.fault)
    return version


def stop_quietly(
    backend: base.ClusterBackend,
    job_id: str,
    grace_period_s: float,
    *,
    reason: str = base.StopReason.STOPPED,
) -> bool:
    """`backend.stop`, its failure logged (the orphan sweep repeats it next cycle)."""
    try:
        backend.stop(job_id, grace_period_s, reason=reason)
        return True
    except Exception as exc:
        log.warning("stop of %s failed (%s); the next cycle repeats it", job_id, exc)
        return False
