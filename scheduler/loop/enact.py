"""The one applier of life-cycle `Transition`s: store first, crash points, backend last.

Every change the loop makes to a job goes through `enact` (a placement recorded as a new
attempt, a resize, a launch the cluster refused, a retry, a preemption, a phase that
follows its workers, the reason a job waits), many jobs at once: the store writes the
first step of every transition in one transaction (with the transition's event), then
the second against the versions the first returned, and so on, each step followed by
its crash points (`scheduler.loop.faults`); then the backoffs, then the backend's stops
and their crash points. A crash after a write leaves workers their job no longer holds,
which the next cycle's orphan sweep stops; a crash before it leaves the old phase,
which the next cycle decides again. A job that moved on meanwhile (or whose write
failed) is left there: its later steps and its stop are not carried out, and its error
is its result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import faults
from scheduler.loop.backoff import Backoff
from scheduler.loop.transition import Transition
from scheduler.store import changes, errors
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)

Step = tuple[changes.Change, str | None]  # a store write and the crash point after it


def enact(
    db: LiveStore,
    backend: base.ClusterBackend,
    todo: Sequence[tuple[LiveJob, Transition]],
    *,
    now: float,
    backoff: Backoff | None = None,
    retries: Backoff | None = None,
) -> list[changes.Result]:
    """Carry out each (job as read, transition); each one's result in its place: the
    job as the store now holds it, or the error that stopped it (`errors.MOVED_ON`: it
    moved on meanwhile). `backoff`/`retries` receive the transitions'
    `hold_launch`/`hold_retry`."""
    at = as_datetime(now)
    held: list[changes.Result] = [lj for lj, _ in todo]
    steps = [_steps(t) for _, t in todo]
    for k in range(max(map(len, steps), default=0)):
        now_due = [i for i, s in enumerate(steps) if k < len(s) and isinstance(held[i], LiveJob)]
        if not now_due:
            break
        writes = [
            changes.JobWrite(lj, steps[i][k][0], _event(lj.id, todo[i][1]) if k == 0 else None)
            for i in now_due
            if isinstance(lj := held[i], LiveJob)
        ]
        for i, result in zip(now_due, db.write(writes=writes, now=at), strict=True):
            held[i] = result
        reached = [steps[i][k][1] for i in now_due if isinstance(held[i], LiveJob)]
        for fault in dict.fromkeys(f for f in reached if f is not None):
            faults.point(fault)
    done = [(lj, t) for (lj, t), r in zip(todo, held, strict=True) if isinstance(r, LiveJob)]
    # In memory only (a crash forgets them anyway), once the store took the change.
    for lj, t in done:
        if t.hold_retry and retries is not None:
            retries.hold(lj.id, now)
        if t.hold_launch and backoff is not None:
            backoff.hold(lj.id, now)
    for lj, t in done:
        if t.stop is not None:
            stop_quietly(backend, lj.id, t.stop.grace_s, reason=t.stop.reason)
            if t.stop.fault is not None:
                faults.point(t.stop.fault)
    return held


def _steps(t: Transition) -> list[Step]:
    """The store writes of `t`, in order."""
    out: list[Step] = []
    if t.place is not None:
        out.append((changes.NewAttempt(t.place.placements, t.place.attempt), t.place.fault))
    if t.resize is not None:
        out.append((changes.Resize(t.resize.placements, t.resize.reason), t.resize.fault))
    for w in t.writes:
        out.append((changes.Move(w.phase, w.reason, w.message, w.count_restart), w.fault))
    if t.pending is not None:
        out.append((changes.Waits(t.pending), None))
    return out


def _event(job_id: str, t: Transition) -> changes.EventWrite | None:
    e = t.event
    return None if e is None else changes.EventWrite(job_id, e.kind, e.reason, e.message)


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


def taken(
    result: changes.Result, job_id: str, what: str, on_error: Callable[[str, str, Exception], None]
) -> LiveJob | None:
    """The job as the store now holds it when `enact` carried its transition out; else
    None, a job that moved on logged (the next cycle decides it again) and any other
    failure handed to `on_error` (it becomes that job's reason)."""
    if isinstance(result, LiveJob):
        return result
    if isinstance(result, errors.MOVED_ON):
        log.info("%s of %s skipped: %s", what, job_id, result)
    else:
        on_error(job_id, what, result)
    return None
