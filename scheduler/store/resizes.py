"""An elastic job's resize in the store (issue 29 part 2): its new placements and
`resized_at` in one compare-and-set, with a `Resized` event carrying the size before
and after, the workers added or removed and why. Its events are its size history."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import convert, schema
from scheduler.store.changes import Resize, refusal
from scheduler.store.rows import add_event, cas_update, current_row

RESIZED = "Resized"


def record_resize(
    *,
    session: Session,
    job_id: str,
    expected_version: int,
    placements: Sequence[model.WorkerPlacement],
    reason: str,
    now: datetime | None = None,
) -> int:
    """A running job's placements become `placements` (same attempt), written BEFORE the
    backend adds or stops a worker: a crash after it leaves workers the loop then adds
    (a grow) or stops (a shrink) again, both idempotent."""
    row = current_row(session, job_id)
    why = refusal(job_id, Phase(row.phase), row.cancel_requested, Resize(tuple(placements), reason))
    if why is not None:
        raise why
    at = now or schema.utcnow()
    values, message, data = resize_values(row, placements, reason, at)
    version = cas_update(session, job_id=job_id, expected_version=expected_version, values=values)
    add_event(session, job_id=job_id, kind=RESIZED, at=at, message=message, data=data)
    session.commit()
    return version


def resize_values(
    row: Any, placements: Sequence[model.WorkerPlacement], reason: str, at: datetime
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The columns a resize of `row` (its `placements` and `attempt`) writes, and its
    `Resized` event's message and data: the size before and after, the workers added or
    removed."""
    values = {"placements": convert.placements_json(placements), "resized_at": at}
    before = sorted(int(p["worker"]) for p in row.placements)
    after = sorted(p.worker for p in placements)
    data = {
        "attempt": row.attempt,
        "from": len(before),
        "to": len(after),
        "added": sorted(set(after) - set(before)),
        "removed": sorted(set(before) - set(after)),
        "placements": values["placements"],
    }
    return values, f"{len(before)} -> {len(after)} workers: {reason}", data


@dataclass(frozen=True, slots=True)
class Resized:
    """One change of an elastic job's size, as its `Resized` event tells it."""

    at: datetime
    attempt: int
    previous: int
    workers: int
    message: str

    @staticmethod
    def of(event: schema.JobEventRow) -> Resized:
        data = event.data
        return Resized(
            event.at, int(data.get("attempt", 0)), int(data.get("from", 0)),
            int(data.get("to", 0)), event.message,
        )  # fmt: skip


def history(*, session: Session, job_id: str) -> list[schema.JobEventRow]:
    """The job's `Resized` events, oldest first: its size over time (`Resized.of` reads
    one)."""
    stmt = (
        select(schema.JobEventRow)
        .where(schema.JobEventRow.job_id == job_id, schema.JobEventRow.kind == RESIZED)
        .order_by(schema.JobEventRow.id)
    )
    return list(session.scalars(stmt))


def last_size(*, session: Session, job_id: str) -> int | None:
    """How many workers the job had when it last held GPUs: its newest `Resized` event's
    size, else its newest placement's (`Scheduled`); None if it never ran. A finished
    elastic job is shown at this size, not at its `min`."""
    stmt = (
        select(schema.JobEventRow)
        .where(
            schema.JobEventRow.job_id == job_id,
            schema.JobEventRow.kind.in_((RESIZED, "Scheduled")),
        )
        .order_by(schema.JobEventRow.id.desc())
        .limit(1)
    )
    event = session.scalars(stmt).first()
    if event is None:
        return None
    if event.kind == RESIZED:
        return int(event.data.get("to", 0)) or None
    return len(event.data.get("placements") or ()) or None
