"""The loop's writes to jobs, many in one transaction: `write` takes each job as the loop
read it (a `LiveJob`) and what happens to it (a `changes.Change`), and gives back each
job as its row now reads (`changes.after`), or why it was not written.

A cycle that sees a hundred jobs change (workers started or ended, a hundred placed)
spent a read, a write and a commit per job; `write` reads the rows it needs in one
query, writes each with its version check, and commits once. A job whose row moved on
meanwhile (another version, a phase the change is not allowed from, cancelled, deleted)
gets its `errors.MOVED_ON` error instead: the next cycle decides it again. The columns
written are those of the one-job functions (`transitions.phase_values`,
`placement_values`, `resizes.resize_values`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Row, Table, Update, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import errors, schema
from scheduler.store.changes import (
    EventWrite,
    JobWrite,
    Move,
    NewAttempt,
    Resize,
    Result,
    Waits,
    after,
    refusal,
)
from scheduler.store.events import append_event
from scheduler.store.resizes import RESIZED, resize_values
from scheduler.store.rows import id_chunks
from scheduler.store.transitions import (
    phase_values,
    placement_values,
    scheduled_event,
    set_pending_reason,
)


def write(*, session: Session, writes: Sequence[JobWrite], now: datetime) -> list[Result]:
    """Each write (see the module doc), its result in its place. The version-checked
    changes and their events go in one transaction; the reasons follow."""
    rows = _rows(session, [w.job.id for w in writes if not isinstance(w.change, Waits)])
    conn = session.connection()
    out: list[Result | None] = []
    events: list[dict[str, Any]] = []
    for w in writes:
        if isinstance(w.change, Waits):
            out.append(None)  # below
            continue
        row = rows.get(w.job.id)
        made = _change(w, row, now)
        if isinstance(made, Exception):
            out.append(made)
            continue
        values, said = made
        if not _cas(conn, w.job.id, w.job.version, values):
            out.append(errors.VersionConflict(w.job.id, w.job.version, None))
            continue
        if w.event is not None:
            events.append(_event(w.event, now))
        events.append(said)
        out.append(after(w.job, w.change, now))
    _insert_events(conn, events)
    session.commit()
    waits = [(i, w) for i, w in enumerate(writes) if isinstance(w.change, Waits)]
    for (i, _), result in zip(waits, _reasons(session, [w for _, w in waits], now), strict=True):
        out[i] = result
    return cast(list[Result], out)


def _change(
    w: JobWrite, row: Row[Any] | None, now: datetime
) -> tuple[dict[str, Any], dict[str, Any]] | Exception:
    """The columns `w` writes and its event row, or why the row does not allow it."""
    job_id, c = w.job.id, w.change
    if row is None:
        return errors.NotFound(f"job {job_id} does not exist", loc=("id",))
    why = refusal(job_id, Phase(row.phase), row.cancel_requested, c)
    if why is not None:
        return why
    if isinstance(c, Move):
        values = phase_values(row.conditions, c.phase, c.reason, c.message, now)
        if c.count_restart:
            values["restarts"] = row.restarts + 1
        said = EventWrite(job_id, c.phase.value, c.reason, c.message)
    elif isinstance(c, NewAttempt):
        values = placement_values(row.conditions, c.placements, c.attempt, now)
        said = EventWrite(job_id, "Scheduled", "", **scheduled_event(values))
    else:
        assert isinstance(c, Resize)
        values, message, data = resize_values(row, c.placements, c.reason, now)
        said = EventWrite(job_id, RESIZED, "", message, data)
    return values, _event(said, now)


def _reasons(session: Session, writes: Sequence[JobWrite], now: datetime) -> list[Result]:
    """Many Pending jobs' reasons in one transaction with no read first: a cycle changes
    the reasons of many waiting jobs at once (the free room named in them moved). One
    whose row did not match (moved on, no longer Pending, or the reason stored already)
    goes through `set_pending_reason` afterwards, which decides it on its own: written
    whatever the version, a repeat no write. Such a job is given back as it was read
    (its version does not say the row's: the loop reads it again)."""
    if not writes:
        return []
    out: list[Result] = []
    conn = session.connection()
    for w in writes:
        r = _reason(w)
        params = {
            "b_id": w.job.id,
            "b_version": w.job.version,
            "b_code": r.code.value,
            "b_message": r.message,
            "b_details": {str(k): v for k, v in r.details.items()},
        }
        hit = conn.execute(_REASON, params).rowcount == 1
        out.append(after(w.job, w.change, now) if hit else w.job)
    session.commit()
    for i, w in enumerate(writes):
        if out[i] is w.job:
            try:
                set_pending_reason(session=session, job_id=w.job.id, reason=_reason(w))
            except errors.MOVED_ON as exc:
                out[i] = exc
    return out


def _reason(w: JobWrite) -> model.PendingReason:
    assert isinstance(w.change, Waits)
    return w.change.reason


def _reason_update() -> Update:
    t = cast(Table, schema.JobRow.__table__)
    return (
        update(t)
        .where(
            t.c.id == bindparam("b_id"),
            t.c.version == bindparam("b_version"),
            t.c.phase == Phase.PENDING.value,
            t.c.pending_code.is_distinct_from(bindparam("b_code"))
            | t.c.pending_message.is_distinct_from(bindparam("b_message")),
        )
        .values(
            pending_code=bindparam("b_code"),
            pending_message=bindparam("b_message"),
            pending_details=bindparam("b_details"),
            version=t.c.version + 1,
        )
    )


_REASON = _reason_update()


def append_events(*, session: Session, events: Sequence[EventWrite], now: datetime) -> None:
    """Events of many jobs in one insert; a job deleted meanwhile loses its event (then
    they are written one by one, as `append_event` would)."""
    if not events:
        return
    try:
        _insert_events(session.connection(), [_event(e, now) for e in events])
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
    cols = (j.id, j.phase, j.cancel_requested, j.conditions, j.restarts, j.attempt, j.placements)
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


def _event(e: EventWrite, at: datetime) -> dict[str, Any]:
    return {"job_id": e.job_id, "at": at, "kind": e.kind, "reason": e.reason,
            "message": e.message, "data": e.data or {}}  # fmt: skip


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(cast(Table, schema.JobEventRow.__table__)), rows)
