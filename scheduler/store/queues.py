"""Queue repository: create, list, get, update, delete (keyword-only, each commits).

Callers validate context first (`scheduler.feasibility.check_queue`: parent fits); the
store enforces what the data itself needs: the parent exists, no cycles, and a queue
with children or live jobs cannot be deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from scheduler.spec import Phase
from scheduler.spec.allowed import Allowances
from scheduler.spec.queue import QueueSpec, QuotaSpec
from scheduler.store import errors, schema

LIVE_PHASES = (Phase.PENDING, Phase.SCHEDULED, Phase.RUNNING, Phase.PREEMPTED)


def quota_json(quota: QuotaSpec | None) -> dict[str, Any] | None:
    """`QuotaSpec` -> the JSON column: {"total": 8.0, "H100": 4.0} (None: no quota)."""
    if quota is None:
        return None
    out: dict[str, Any] = {"total": quota.total}
    out.update(quota.by_model)
    return out


def allowed_json(allowed: Allowances | None) -> dict[str, Any] | None:
    """`Allowances` -> the JSON column (kinds not given left out: the chart's apply)."""
    return (
        None
        if allowed is None
        else allowed.model_dump(mode="json", by_alias=True, exclude_none=True)
    )


def allowed_of(row: schema.QueueRow) -> Allowances | None:
    return None if row.allowed is None else Allowances.model_validate(row.allowed)


def load_allowed(*, session: Session) -> dict[str, Allowances]:
    """Every queue's own limits on what its jobs may ask (queues without any left out)."""
    rows = session.execute(
        select(schema.QueueRow.name, schema.QueueRow.allowed).where(
            schema.QueueRow.allowed.is_not(None)
        )
    )
    return {name: Allowances.model_validate(data) for name, data in rows if data is not None}


def spec_of(row: schema.QueueRow) -> QueueSpec:
    """The stored queue as the spec it was created from."""
    return QueueSpec(
        name=row.name,
        parent=row.parent,
        guaranteed=QuotaSpec.model_validate(row.guaranteed),
        limit=None if row.limit is None else QuotaSpec.model_validate(row.limit),
        weight=row.weight,
        priority=row.priority,
        allowed=allowed_of(row),
    )


def _check_parent(session: Session, name: str, parent: str | None) -> None:
    seen = {name}
    current = parent
    while current is not None:
        if current in seen:
            raise errors.Conflict(f"parent {parent!r} would make a cycle", loc=("parent",))
        seen.add(current)
        row = session.get(schema.QueueRow, current)
        if row is None:
            raise errors.NotFound(f"parent queue {current!r} does not exist", loc=("parent",))
        current = row.parent


def create_queue(
    *, session: Session, spec: QueueSpec, now: datetime | None = None
) -> schema.QueueRow:
    """Insert a queue; `Conflict` if the name is taken, `NotFound` if the parent is."""
    if session.get(schema.QueueRow, spec.name) is not None:
        raise errors.Conflict(f"queue {spec.name!r} already exists", loc=("name",))
    _check_parent(session, spec.name, spec.parent)
    at = now or schema.utcnow()
    row = schema.QueueRow(
        name=spec.name,
        parent=spec.parent,
        guaranteed=quota_json(spec.guaranteed) or {"total": None},
        limit=quota_json(spec.limit),
        weight=spec.weight,
        priority=spec.priority,
        allowed=allowed_json(spec.allowed),
        created_at=at,
        updated_at=at,
        version=1,
    )
    session.add(row)
    session.commit()
    return row


def list_queues(*, session: Session, names: Sequence[str] | None = None) -> list[schema.QueueRow]:
    """Every queue by name, or only `names` (a caller's visible queues)."""
    stmt = select(schema.QueueRow).order_by(schema.QueueRow.name)
    if names is not None:
        stmt = stmt.where(schema.QueueRow.name.in_(names))
    return list(session.scalars(stmt))


def get_queue(*, session: Session, name: str) -> schema.QueueRow:
    row = session.get(schema.QueueRow, name)
    if row is None:
        raise errors.NotFound(f"queue {name!r} does not exist", loc=("name",))
    return row


def update_queue(
    *,
    session: Session,
    spec: QueueSpec,
    expected_version: int | None = None,
    now: datetime | None = None,
) -> schema.QueueRow:
    """Replace queue `spec.name`'s fields; with `expected_version`, only from that version."""
    row = get_queue(session=session, name=spec.name)
    _check_parent(session, spec.name, spec.parent)
    version = row.version if expected_version is None else expected_version
    result = session.execute(
        update(schema.QueueRow)
        .where(schema.QueueRow.name == spec.name, schema.QueueRow.version == version)
        .values(
            parent=spec.parent,
            guaranteed=quota_json(spec.guaranteed) or {"total": None},
            limit=quota_json(spec.limit),
            weight=spec.weight,
            priority=spec.priority,
            allowed=allowed_json(spec.allowed),
            updated_at=now or schema.utcnow(),
            version=version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        raise errors.Conflict(
            f"queue {spec.name!r} changed meanwhile (expected version {version})",
            loc=("version",),
        )
    session.commit()
    session.refresh(row)
    return row


def delete_queue(*, session: Session, name: str) -> None:
    """Delete a queue with no children and no live jobs; `Conflict` says which."""
    row = get_queue(session=session, name=name)
    children = session.scalars(
        select(schema.QueueRow.name).where(schema.QueueRow.parent == name)
    ).all()
    if children:
        raise errors.Conflict(
            f"queue {name!r} has child queues: {', '.join(children)}", loc=("name",)
        )
    live = session.scalar(
        select(func.count())
        .select_from(schema.JobRow)
        .where(schema.JobRow.queue == name, schema.JobRow.phase.in_(LIVE_PHASES))
    )
    if live:
        raise errors.Conflict(
            f"queue {name!r} has {live} live job(s) (pending, scheduled or running); "
            "cancel them or wait until they finish",
            loc=("name",),
        )
    session.delete(row)
    session.commit()
