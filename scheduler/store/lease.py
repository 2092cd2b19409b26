"""The single-scheduler lease, on the database's clock: one scheduler loop at a time
holds it, and another takes over only once it has expired by the database's time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from scheduler.store import schema


def database_now(*, session: Session) -> datetime:
    """The database server's clock (aware UTC). Replicas may disagree about the time; the
    one database they share decides when a lease expires. SQLite's clock is the host's."""
    if session.get_bind().dialect.name == "sqlite":
        raw = session.execute(select(func.strftime("%Y-%m-%d %H:%M:%f", "now"))).scalar_one()
        return datetime.fromisoformat(str(raw)).replace(tzinfo=UTC)
    if session.get_bind().dialect.name == "postgresql":
        # clock_timestamp(), not now(): now() is frozen at the start of the transaction.
        at: datetime = session.execute(select(func.clock_timestamp())).scalar_one()
    else:
        at = session.execute(select(func.current_timestamp())).scalar_one()
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def acquire_lease(*, session: Session, holder: str, ttl_s: float) -> bool:
    """Take or renew the scheduling lease until the database's now + ttl_s; False while
    another holder's lease is unexpired. Expiry is read and written on the database's
    clock, never the caller's, so a replica whose clock runs ahead cannot take over early.
    One conditional UPDATE, so two processes cannot both win."""
    now = database_now(session=session)
    result = session.execute(
        update(schema.LeaseRow)
        .where(
            schema.LeaseRow.id == 1,
            (schema.LeaseRow.holder == holder) | (schema.LeaseRow.expires_at <= now),
        )
        .values(holder=holder, expires_at=now + timedelta(seconds=ttl_s))
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def release_lease(*, session: Session, holder: str) -> None:
    """Give the lease up (only if `holder` has it), so another scheduler need not wait."""
    session.execute(
        update(schema.LeaseRow)
        .where(schema.LeaseRow.id == 1, schema.LeaseRow.holder == holder)
        .values(holder="", expires_at=datetime(1970, 1, 1, tzinfo=UTC))
        .execution_options(synchronize_session=False)
    )
    session.commit()


def lease_holder(*, session: Session) -> str | None:
    """Who holds the lease now, by the database's clock (None when nobody does)."""
    now = database_now(session=session)
    row = session.get(schema.LeaseRow, 1, populate_existing=True)
    return row.holder if row is not None and row.holder and row.expires_at > now else None
