"""One job's row, found and changed safely: `get_job` (a read limited to the caller's
visible queues), `current_row` (a fresh re-read before a write), `cas_update` (an UPDATE
only at the version read: optimistic concurrency), `add_event` (the event staged in
the same transaction) and `id_chunks` (many ids as IN lists). Every module that changes
a job goes through these, so two writers racing on one job cannot both win.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from scheduler.store import errors, schema

IN_CHUNK = 500  # ids per IN list: old SQLite builds allow 999 bound parameters


def id_chunks(ids: Iterable[str]) -> list[list[str]]:
    """`ids`, sorted and each once, cut into IN lists short enough for any SQLite."""
    ordered = sorted(set(ids))
    return [ordered[i : i + IN_CHUNK] for i in range(0, len(ordered), IN_CHUNK)]


def add_event(
    session: Session,
    *,
    job_id: str,
    kind: str,
    reason: str = "",
    message: str = "",
    data: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> None:
    """Stage an event in the caller's transaction (no commit)."""
    session.add(
        schema.JobEventRow(
            job_id=job_id,
            at=at or schema.utcnow(),
            kind=kind,
            reason=reason,
            message=message,
            data=dict(data or {}),
        )
    )


def cas_update(
    session: Session, *, job_id: str, expected_version: int, values: Mapping[str, Any]
) -> int:
    """UPDATE the job WHERE version = expected; returns the new version, else raises
    `VersionConflict` (or `NotFound`) after rolling back. The caller commits."""
    new_version = expected_version + 1
    result = session.execute(
        update(schema.JobRow)
        .where(schema.JobRow.id == job_id, schema.JobRow.version == expected_version)
        .values(**values, version=new_version)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        actual = session.scalar(select(schema.JobRow.version).where(schema.JobRow.id == job_id))
        if actual is None:
            raise errors.NotFound(f"job {job_id} does not exist", loc=("id",))
        raise errors.VersionConflict(job_id, expected_version, actual)
    return new_version


def current_row(session: Session, job_id: str) -> schema.JobRow:
    stmt = (
        select(schema.JobRow)
        .where(schema.JobRow.id == job_id)
        .execution_options(populate_existing=True)
    )
    row = session.scalars(stmt).first()
    if row is None:
        raise errors.NotFound(f"job {job_id} does not exist", loc=("id",))
    return row


def get_job(
    *, session: Session, job_id: str, queues: Collection[str] | None = None
) -> schema.JobRow:
    """One job; `NotFound` also when `queues` (the caller's visible queues) excludes it."""
    row = session.scalars(select(schema.JobRow).where(schema.JobRow.id == job_id)).first()
    if row is None or (queues is not None and row.queue not in queues):
        raise errors.NotFound(f"job {job_id} does not exist", loc=("path", "job_id"))
    session.refresh(row)  # another session may have moved it on
    return row
