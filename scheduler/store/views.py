"""Read-only queries the API's views need (what a reason's job ids are called, how each
node enforces fractions), kept here so that `api` runs no SQL and imports no SQLAlchemy.

`session_of` for the same reason: the API finds the session a loaded row belongs to
(the `Session` type itself it takes from `scheduler.store.db`).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from scheduler.store import schema


def session_of(row: object) -> Session | None:
    """The session `row` was loaded in (None for a detached row)."""
    return object_session(row)


def job_labels(*, session: Session, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """id -> (name, queue) of the jobs among `ids` the store knows (one query)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    t = schema.JobRow
    rows = session.execute(select(t.id, t.name, t.queue).where(t.id.in_(wanted)))
    return {r.id: (r.name, r.queue) for r in rows}


def node_enforcement(*, session: Session) -> dict[str, str]:
    """node -> how it enforces fractional GPUs, for every node of the inventory."""
    t = schema.InventoryRow
    return {name: how for name, how in session.execute(select(t.name, t.enforcement))}
