"""A job's append-only history: the loop appends events (`append_event`), the API lists
them whole or a page at a time, and the chatty kinds (Progress) are pruned to the newest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from scheduler.store import schema
from scheduler.store.paging import MAX_PAGE, decode_cursor, encode_cursor
from scheduler.store.rows import add_event, current_row, get_job


def append_event(
    *,
    session: Session,
    job_id: str,
    kind: str,
    reason: str = "",
    message: str = "",
    data: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> None:
    """Add one event to a job's append-only history (e.g. "Launched", "PreemptSignal")."""
    current_row(session, job_id)
    add_event(session, job_id=job_id, kind=kind, reason=reason, message=message, data=data, at=now)
    session.commit()


def list_events(
    *, session: Session, job_id: str, queues: Collection[str] | None = None
) -> list[schema.JobEventRow]:
    """A job's history, oldest first."""
    get_job(session=session, job_id=job_id, queues=queues)
    stmt = (
        select(schema.JobEventRow)
        .where(schema.JobEventRow.job_id == job_id)
        .order_by(schema.JobEventRow.id)
    )
    return list(session.scalars(stmt))


@dataclass(frozen=True, slots=True)
class EventPage:
    items: list[schema.JobEventRow]
    next_cursor: str | None  # None on the last page


def events_page(
    *,
    session: Session,
    job_id: str,
    queues: Collection[str] | None = None,
    limit: int = MAX_PAGE,
    cursor: str | None = None,
    newest_first: bool = False,
) -> EventPage:
    """One page of a job's history (oldest first, or newest first); keyset pagination on
    the event id, so a page is stable while events are being appended."""
    get_job(session=session, job_id=job_id, queues=queues)
    order = schema.JobEventRow.id.desc() if newest_first else schema.JobEventRow.id
    stmt = select(schema.JobEventRow).where(schema.JobEventRow.job_id == job_id).order_by(order)
    if cursor is not None:
        at = decode_cursor(cursor)
        stmt = stmt.where(
            schema.JobEventRow.id < at if newest_first else schema.JobEventRow.id > at
        )
    limit = max(1, min(limit, MAX_PAGE))
    rows = list(session.scalars(stmt.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(rows, encode_cursor(rows[-1].id) if more and rows else None)


def prune_events(*, session: Session, job_id: str, kind: str, keep: int) -> int:
    """Delete all but the newest `keep` events of `kind` of one job (the Progress events:
    only the recent ones are worth keeping); returns how many went. Commits."""
    newest = (
        select(schema.JobEventRow.id)
        .where(schema.JobEventRow.job_id == job_id, schema.JobEventRow.kind == kind)
        .order_by(schema.JobEventRow.id.desc())
        .offset(keep)
        .limit(1)
    )
    cut = session.scalars(newest).first()
    if cut is None:
        return 0
    result = session.execute(
        delete(schema.JobEventRow)
        .where(
            schema.JobEventRow.job_id == job_id,
            schema.JobEventRow.kind == kind,
            schema.JobEventRow.id <= cut,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
