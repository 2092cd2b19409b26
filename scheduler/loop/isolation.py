"""One job's trouble is that job's: an exception while handling one job becomes its
reason (`JobError`) and an event, and the job sits out a backoff while the cycle goes on
for the others (`record`); a core failure is traced to the pending job that causes it by
bisection (`schedule`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from scheduler import model
from scheduler.clock import as_datetime
from scheduler.loop.context import Memory
from scheduler.store import errors
from scheduler.store.changes import EventWrite
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)

ScheduleFn = Callable[[model.Snapshot], model.CycleResult]
# At most this many pending jobs are blamed (and left out) in one cycle.
MAX_CULPRITS = 8


def record(
    db: LiveStore, memory: Memory, job_id: str, step: str, error: Exception | str, now: float
) -> None:
    """Make an exception while handling one job that job's reason and event, and hold
    it out of the next cycles for a backoff (the memory's `faulty`); never raises. The
    memory's written reason of the job goes, as the store's is replaced."""
    delay = memory.faulty.hold(job_id, now)
    if isinstance(error, Exception):
        log.error("job %s: %s failed; retry in %.0fs", job_id, step, delay, exc_info=error)
        error = f"{type(error).__name__}: {error}"
    else:
        log.error("job %s: %s failed (%s); retry in %.0fs", job_id, step, error, delay)
    # A pydantic error quotes the offending value, which may be thousands of digits.
    text = error if len(error) <= 300 else error[:300] + "..."
    message = f"{step} failed for this job: {text}; retrying in {delay:.0f}s"
    try:
        db.rollback()  # whatever the failed step left half-done
        db.append_events(
            events=[EventWrite(job_id, "JobError", step, message)], now=as_datetime(now)
        )
        reason = model.PendingReason(
            model.ReasonCode.JOB_ERROR, message, {"step": step, "retryInSeconds": round(delay)}
        )
        memory.reasons.pop(job_id, None)
        db.note_waiting(job_id=job_id, reason=reason)
    except (errors.InvalidTransition, errors.NotFound):
        pass  # not Pending (its reason is the event) or deleted meanwhile
    except Exception:
        log.exception("could not record the error of job %s", job_id)


def schedule(
    run: ScheduleFn, snapshot: model.Snapshot, blame: Callable[[str, Exception], None]
) -> model.CycleResult:
    """The core's decisions; when it raises, the pending job that makes it raise is
    found by bisection (the shortest failing prefix of the pending list), `blame`d, and
    the core run again without it (at most `MAX_CULPRITS` a cycle). A failure with no
    pending job to blame (a running job's data) is raised: leaving a running job out
    would free GPUs it holds."""
    try:
        return run(snapshot)
    except Exception as first:
        error: Exception = first
    pending = list(snapshot.pending)
    for _ in range(MAX_CULPRITS):
        if not pending:
            break

        def fails(n: int) -> Exception | None:
            try:
                run(dataclasses.replace(snapshot, pending=tuple(pending[:n])))
            except Exception as exc:
                return exc
            return None

        if fails(0) is not None:
            break  # not a pending job's fault
        lo, hi = 0, len(pending)  # pending[:lo] passes, pending[:hi] fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (exc := fails(mid)) is None:
                lo = mid
            else:
                hi, error = mid, exc
        culprit = pending.pop(hi - 1)
        blame(culprit.id, error)
        try:
            return run(dataclasses.replace(snapshot, pending=tuple(pending)))
        except Exception as exc:
            error = exc
    raise error
