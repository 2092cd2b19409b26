"""Start-time estimates of pending jobs (issue 29 part 1).

The scheduler's estimator replays the current state forward (`core.forecast`) beside the
loop and replaces the whole set here when it has computed a new one (between two, a job
the last one did not cover gets a placeholder row, `add_missing`); the API, the CLI and
the dashboard read one job's (`of`) or a page's (`of_many`). A job that started, or left
the queue, loses its row at the next replacement; readers show an estimate only for a
job still pending.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from scheduler.spec import Phase
from scheduler.store import convert, rows, schema


@dataclass(frozen=True, slots=True)
class StartEstimate:
    job_id: str
    start_at: datetime | None  # None: unknown, and `unknown` says why
    position: int  # 1-based, in its queue's pending order
    basis: str  # what the estimate rests on (runtimes, and where they came from)
    unknown: str
    computed_at: datetime


def replace_all(*, session: Session, estimates: Sequence[StartEstimate]) -> None:
    """Make the table hold exactly these estimates."""
    session.execute(delete(schema.EstimateRow))
    session.add_all(_row(e) for e in estimates)
    session.commit()


def add_missing(*, session: Session, estimates: Sequence[StartEstimate]) -> None:
    """Add these estimates of jobs that have none (the estimator's placeholders for jobs
    its last forecast did not cover); a row already there is kept."""
    have = of_many(session=session, job_ids=[e.job_id for e in estimates])
    session.add_all(_row(e) for e in estimates if e.job_id not in have)
    session.commit()


def _row(e: StartEstimate) -> schema.EstimateRow:
    return schema.EstimateRow(
        job_id=e.job_id,
        start_at=e.start_at,
        position=e.position,
        basis=e.basis,
        unknown=e.unknown,
        computed_at=e.computed_at,
    )


def _of(row: schema.EstimateRow) -> StartEstimate:
    return StartEstimate(
        row.job_id, row.start_at, row.position, row.basis, row.unknown, row.computed_at
    )


def of(*, session: Session, job_id: str) -> StartEstimate | None:
    row = session.get(schema.EstimateRow, job_id)
    return _of(row) if row is not None else None


def of_many(*, session: Session, job_ids: Collection[str]) -> dict[str, StartEstimate]:
    out: dict[str, StartEstimate] = {}
    for chunk in rows.id_chunks(list(job_ids)):
        query = select(schema.EstimateRow).where(schema.EstimateRow.job_id.in_(chunk))
        out.update((r.job_id, _of(r)) for r in session.scalars(query))
    return out


def finished_runtimes(
    *, session: Session, limit: int = 2000
) -> list[tuple[str, float, int, float]]:
    """(queue, GPUs per worker, workers, runtime s) of the latest jobs that succeeded:
    what `core.forecast.RuntimeModel` estimates a running job's end from."""
    job = schema.JobRow
    query = (
        select(job)
        .where(job.phase == Phase.SUCCEEDED.value, job.started_at.is_not(None))
        .order_by(job.finished_at.desc())
        .limit(limit)
    )
    out = []
    for row in session.scalars(query):
        if row.finished_at is None or row.started_at is None:
            continue
        spec = convert.job_spec(row)
        took = (row.finished_at - row.started_at).total_seconds()
        out.append((row.queue, float(spec.gpu or 0.0), spec.min_workers, max(0.0, took)))
    return out
