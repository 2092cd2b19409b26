"""Many jobs' writes in one transaction: the phases that follow workers, the placements
the core decided, and the events of completed launches.

A cycle that sees a hundred jobs change (workers started or ended, a hundred placed)
spent a read, a write and a commit per job; these functions read the rows they need in
one query, write each with its version check, and commit once. A job whose row moved on
meanwhile (another version, a phase the move is not allowed from, cancelled) is left
out and not in the ids returned: the next cycle decides it again. The columns written
are those of the one-job functions (`transitions.phase_values`, `placement_values`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, Row, Table, Update, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import errors, schema
from scheduler.store.events import append_event
from scheduler.store.rows import id_chunks
from scheduler.store.transitions import (
    TRANSITIONS,
    phase_values,
    placement_values,
    scheduled_event,
)


@dataclass(frozen=True, slots=True)
class PhaseWrite:
    """Move `job_id`, read at `expected_version`, to `phase` (no restart counted)."""

    job_id: str
    expected_version: int
    phase: Phase
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class PlacementWrite:
    """Record `placements` as attempt `attempt` of Pending `job_id` at `expected_version`."""

    job_id: str
    expected_version: int
    placements: tuple[model.WorkerPlacement, ...]
    attempt: int


@dataclass(frozen=True, slots=True)
class EventWrite:
    job_id: str
    kind: str
    reason: str
    message: str
    data: dict[str, Any]


Written = dict[str, dict[str, Any]]  # job id -> the columns written at its expected version


def set_phases(*, session: Session, writes: Sequence[PhaseWrite], now: datetime) -> Written:
    """Each write's phase move, with its event, in one transaction; what was written."""

    def move(w: PhaseWrite, row: Row[Any]) -> _Change | None:
        if w.phase not in TRANSITIONS[Phase(row.phase)]:
            return None
        values = phase_values(row.conditions, w.phase, w.reason, w.message, now)
        return values, _event(w.job_id, w.phase.value, w.reason, w.message, {}, now)

    return _write(session, writes, move)


def record_placements(
    *, session: Session, writes: Sequence[PlacementWrite], now: datetime
) -> Written:
    """Each Pending job's placement (Scheduled), with its event, in one transaction,
    before anything is launched; what was written."""

    def place(w: PlacementWrite, row: Row[Any]) -> _Change | None:
        if row.phase != Phase.PENDING.value or row.cancel_requested:
            return None
        values = placement_values(row.conditions, w.placements, w.attempt, now)
        said = scheduled_event(values)
        return values, _event(w.job_id, "Scheduled", "", said["message"], said["data"], now)

    return _write(session, writes, place)


_Change = tuple[dict[str, Any], dict[str, Any]]  # (the columns to write, the event row)
W = TypeVar("W", PhaseWrite, PlacementWrite)


def _write(
    session: Session, writes: Sequence[W], change: Callable[[W, Row[Any]], _Change | None]
) -> Written:
    """Each write's change (None: not allowed from the row's phase) at its expected
    version, then the events of those written, in one transaction."""
    rows = _rows(session, [w.job_id for w in writes])
    done: Written = {}
    events = []
    conn = session.connection()
    for w in writes:
        row = rows.get(w.job_id)
        made = None if row is None else change(w, row)
        if made is not None and _cas(conn, w.job_id, w.expected_version, made[0]):
            done[w.job_id] = made[0]
            events.append(made[1])
    _insert_events(conn, events)
    session.commit()
    return done


def append_events(*, session: Session, events: Sequence[EventWrite], now: datetime) -> None:
    """Events of many jobs in one insert; a job deleted meanwhile loses its event (then
    they are written one by one, as `append_event` would)."""
    if not events:
        return
    rows = [_event(e.job_id, e.kind, e.reason, e.message, e.data, now) for e in events]
    try:
        _insert_events(session.connection(), rows)
        session.commit()
        return
    except IntegrityError:
        session.rollback()
    for e in events:
        with contextlib.suppress(errors.NotFound):
            append_event(session=session, job_id=e.job_id, kind=e.kind, reason=e.reason,
                         message=e.message, data=e.data, now=now)  # fmt: skip


def _rows(session: Session, ids: Sequence[str]) -> dict[str, Row[Any]]:
    j = schema.JobRow
    cols = (j.id, j.version, j.phase, j.cancel_requested, j.conditions)
    out: dict[str, Row[Any]] = {}
    for chunk in id_chunks(ids):
        out.update((r.id, r) for r in session.execute(select(*cols).where(j.id.in_(chunk))))
    return out


def _cas(conn: Connection, job_id: str, expected: int, values: dict[str, Any]) -> bool:
    params = {f"b_{k}": v for k, v in values.items()}
    params.update(b_id=job_id, b_version=expected, b_new=expected + 1)
    return bool(conn.execute(_update(tuple(sorted(values))), params).rowcount == 1)


@functools.cache
def _update(columns: tuple[str, ...]) -> Update:
    """The UPDATE of `columns` at a version, made once per set of columns: compiling a
    new statement per row cost more than running it."""
    t = cast(Table, schema.JobRow.__table__)
    return (
        update(t)
        .where(t.c.id == bindparam("b_id"), t.c.version == bindparam("b_version"))
        .values({**{c: bindparam(f"b_{c}") for c in columns}, "version": bindparam("b_new")})
    )


def _event(
    job_id: str, kind: str, reason: str, message: str, data: dict[str, Any], at: datetime
) -> dict[str, Any]:
    return {"job_id": job_id, "at": at, "kind": kind, "reason": reason, "message": message,
            "data": data}  # fmt: skip


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(cast(Table, schema.JobEventRow.__table__)), rows)
