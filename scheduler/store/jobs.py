"""Job repository for the API and the CRD controller: list, cancel, count, and the CR
watcher's read of the jobs it submitted. Submission (`submission`), one row's read and
versioned write (`rows`) and a job's history (`events`) have modules of their own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.spec import Origin, Phase
from scheduler.store import errors, schema
from scheduler.store.paging import MAX_PAGE, decode_cursor, encode_cursor
from scheduler.store.rows import add_event, cas_update, get_job

_CAS_RETRIES = 5


@dataclass(frozen=True, slots=True)
class JobPage:
    items: list[schema.JobRow]
    next_cursor: str | None  # None on the last page


def live_with_origin(
    *, session: Session, kind: str, namespaces: Collection[str]
) -> list[tuple[str, Origin]]:
    """(job id, origin) of every live job, not already being cancelled, that was
    submitted as an object of `kind` in `namespaces` (the CR watcher's `cancel_missing`)."""
    stmt = select(schema.JobRow).where(
        schema.JobRow.origin_kind == kind,
        schema.JobRow.origin_namespace.in_(namespaces),
        schema.JobRow.phase.not_in(schema.FINISHED_PHASES),
        schema.JobRow.cancel_requested.is_(False),
    )
    return [(row.id, origin) for row in session.scalars(stmt) if (origin := row.origin)]


def list_jobs(
    *,
    session: Session,
    queues: Collection[str] | None = None,
    queue: str | None = None,
    phase: Phase | None = None,
    submitter: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> JobPage:
    """Jobs newest first, filtered; `queues` restricts to the caller's visible queues.
    Keyset pagination on `seq`: stable while jobs are being submitted."""
    stmt = select(schema.JobRow).order_by(schema.JobRow.seq.desc())
    if queues is not None:
        stmt = stmt.where(schema.JobRow.queue.in_(list(queues)))
    if queue is not None:
        stmt = stmt.where(schema.JobRow.queue == queue)
    if phase is not None:
        stmt = stmt.where(schema.JobRow.phase == phase.value)
    if submitter is not None:
        stmt = stmt.where(schema.JobRow.submitter == submitter)
    if cursor is not None:
        stmt = stmt.where(schema.JobRow.seq < decode_cursor(cursor))
    limit = max(1, min(limit, MAX_PAGE))
    rows = list(session.scalars(stmt.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return JobPage(rows, encode_cursor(rows[-1].seq) if more and rows else None)


def cancel_job(
    *,
    session: Session,
    job_id: str,
    by: str,
    queues: Collection[str] | None = None,
    now: datetime | None = None,
) -> schema.JobRow:
    """Cancel: a Pending/Preempted job becomes Cancelled at once; a Scheduled/Running one
    gets `cancel_requested` and the loop stops its workers, then sets Cancelled. Cancelling
    a cancelled job is a no-op; a Succeeded/Failed one raises `Conflict`."""
    for _ in range(_CAS_RETRIES):
        row = get_job(session=session, job_id=job_id, queues=queues)
        phase = Phase(row.phase)
        at = now or schema.utcnow()
        if phase is Phase.CANCELLED or (row.cancel_requested and not phase.finished):
            return row
        if phase.finished:
            raise errors.Conflict(f"job {job_id} already {phase.value}", loc=("path", "job_id"))
        if phase in (Phase.PENDING, Phase.PREEMPTED):
            values: dict[str, Any] = {
                "phase": Phase.CANCELLED.value,
                "finished_at": at,
                "cancel_requested": True,
                "placements": [],
            }
            kind = "Cancelled"
        else:
            values = {"cancel_requested": True}
            kind = "CancelRequested"
        try:
            cas_update(session, job_id=job_id, expected_version=row.version, values=values)
        except errors.VersionConflict:
            continue  # the loop moved it on; decide again on the new state
        add_event(session, job_id=job_id, kind=kind, message=f"by {by}", at=at)
        session.commit()
        session.refresh(row)
        return row
    raise errors.Conflict(f"job {job_id} kept changing; try again", loc=("path", "job_id"))


def count_by_phase(*, session: Session, queues: Collection[str] | None = None) -> dict[str, int]:
    """Number of jobs in each phase (every phase present, zeros included)."""
    stmt = select(schema.JobRow.phase, func.count()).group_by(schema.JobRow.phase)
    if queues is not None:
        stmt = stmt.where(schema.JobRow.queue.in_(list(queues)))
    counts = {p.value: 0 for p in Phase}
    for phase, n in session.execute(stmt):
        counts[phase] = n
    return counts
