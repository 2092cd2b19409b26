"""Deleting finished jobs: one at a time (`DELETE /api/v1/jobs/{id}`) and by a retention
TTL the scheduler loop applies.

A job's events go with it (ON DELETE CASCADE, and deleted explicitly for SQLite
connections made without foreign keys). Only finished jobs (Succeeded, Failed,
Cancelled) are ever deleted: a live job is cancelled first.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from scheduler.store import errors, schema
from scheduler.store.rows import get_job, id_chunks

FINISHED = schema.FINISHED_PHASES
PURGE_BATCH = 500


def _delete(session: Session, ids: list[str]) -> None:
    session.execute(delete(schema.JobEventRow).where(schema.JobEventRow.job_id.in_(ids)))
    session.execute(delete(schema.JobRow).where(schema.JobRow.id.in_(ids)))


def delete_job(
    *, session: Session, job_id: str, queues: Collection[str] | None = None
) -> schema.JobRow:
    """Delete one finished job and its events; `Conflict` while it is live. Returns the
    row as it was."""
    row = get_job(session=session, job_id=job_id, queues=queues)
    if row.phase not in FINISHED:
        raise errors.Conflict(
            f"job {row.name} ({job_id}) is {row.phase}; cancel it first, then delete it",
            loc=("path", "job_id"),
        )
    # The phase is checked again in the statement: a job cannot come back to life, but
    # this keeps the rule in one place should that ever change.
    session.execute(delete(schema.JobEventRow).where(schema.JobEventRow.job_id == job_id))
    session.execute(
        delete(schema.JobRow).where(schema.JobRow.id == job_id, schema.JobRow.phase.in_(FINISHED))
    )
    session.commit()
    return row


def purge_finished(*, session: Session, finished_before: datetime) -> list[str]:
    """Delete jobs that finished before `finished_before` (at most `PURGE_BATCH` a call);
    returns their ids."""
    stmt = (
        select(schema.JobRow.id)
        .where(
            schema.JobRow.phase.in_(FINISHED),
            schema.JobRow.finished_at.is_not(None),
            schema.JobRow.finished_at < finished_before,
        )
        .order_by(schema.JobRow.seq)
        .limit(PURGE_BATCH)
    )
    ids = list(session.scalars(stmt))
    if ids:
        _delete(session, ids)
        session.commit()
    return ids


def deleted_among(*, session: Session, job_ids: Collection[str]) -> set[str]:
    """Those of `job_ids` the store no longer has (deleted, or purged by the TTL): a
    backend that keeps files per job (local logs) drops theirs."""
    kept: set[str] = set()
    for part in id_chunks(job_ids):
        kept.update(session.scalars(select(schema.JobRow.id).where(schema.JobRow.id.in_(part))))
    return set(job_ids) - kept
