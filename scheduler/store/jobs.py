"""Job repository for the API and the CRD controller: submit, list, get, cancel, events.

Every state change is one transaction that checks the row's `version` (optimistic
concurrency, `cas_update`); the loop's writes in `scheduler.store.cycle` use the same
helper, so two writers racing on one job cannot both win.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Insert, Integer, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler.spec import JobSpec, Origin, Phase, spec_json
from scheduler.store import errors, schema

MAX_PAGE = 500
_CAS_RETRIES = 5


@dataclass(frozen=True, slots=True)
class JobPage:
    items: list[schema.JobRow]
    next_cursor: str | None  # None on the last page


def request_hash(spec: JobSpec) -> str:
    """Idempotency fingerprint: same validated spec -> same hash, whatever key order."""
    canonical = json.dumps(spec_json(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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


def submit_job(
    *,
    session: Session,
    spec: JobSpec,
    submitter: str,
    idempotency_key: str | None = None,
    now: datetime | None = None,
    origin: Origin | None = None,
    job_id: str | None = None,
) -> tuple[schema.JobRow, bool]:
    """Store a new Pending job; returns (job, created). A repeat of `idempotency_key` by
    the same submitter with the same spec returns the first job and created=False; with a
    different spec it raises `IdempotencyMismatch`. Raises `NotFound` for an unknown queue.
    `job_id` replaces the random id (the simulator's: the core breaks ties by id, so a
    replay with random ids would not be repeatable). The job returned is not attached to
    `session` (it was written with Core statements)."""
    digest = request_hash(spec)
    if idempotency_key is not None:
        existing = _by_key(session, submitter, idempotency_key)
        if existing is not None:
            return _replay(existing, digest), False
    at = now or schema.utcnow()
    values: dict[str, Any] = {
        "id": job_id or uuid.uuid4().hex[:16],
        "name": spec.name,
        "queue": spec.queue,
        "submitter": submitter,
        "spec": spec_json(spec),
        "phase": Phase.PENDING.value,
        "conditions": [],
        "placements": [],
        "attempt": 0,
        "restarts": 0,
        "cancel_requested": False,
        "created_at": at,
        "idempotency_key": idempotency_key,
        "request_hash": digest,
        "version": 1,
        "origin_kind": None if origin is None else origin.kind,
        "origin_namespace": None if origin is None else origin.namespace,
        "origin_name": None if origin is None else origin.name,
        "origin_uid": None if origin is None else origin.uid,
    }
    try:
        stored = _insert(session, values, spec.priority)
    except IntegrityError:
        # The unique indexes decide, not a read before the insert (one statement less per
        # submission): a live job of this name, or a concurrent retry of this key, won.
        session.rollback()
        won = None if idempotency_key is None else _by_key(session, submitter, idempotency_key)
        clash = (
            _replay(won, digest)
            if won is not None
            else _replay_or_refuse(session, spec, submitter, idempotency_key, digest)
        )
        if clash is None:
            raise
        return clash, False
    if stored is None:
        session.rollback()
        raise errors.NotFound(f"queue {spec.queue!r} does not exist", loc=("queue",))
    seq, priority = stored
    event = {"at": at, "kind": "Submitted", "reason": "", "message": f"by {submitter}"}
    session.execute(_submit_statements()[1], {"job_id": values["id"], "data": {}, **event})
    session.commit()
    return schema.JobRow(seq=seq, priority=priority, **values), True


def _insert(
    session: Session, values: Mapping[str, Any], priority: int | None
) -> tuple[int, int] | None:
    """INSERT the job with its priority (the spec's, else its queue's) read in the same
    statement: (seq, priority), or None when the queue does not exist."""
    params = {**values, "own_priority": priority, "queue_name": values["queue"]}
    row = session.execute(_submit_statements()[0], params).first()
    return None if row is None else (row[0], row[1])


_JOB_COLUMNS = (
    *("id", "name", "queue", "submitter", "spec", "phase", "conditions", "placements"),
    *("attempt", "restarts", "cancel_requested", "created_at", "idempotency_key"),
    *("request_hash", "version", "origin_kind", "origin_namespace", "origin_name", "origin_uid"),
)


@functools.cache
def _submit_statements() -> tuple[Insert, Insert]:
    """The submission's two statements, built once with bind parameters: Core on the
    tables, not the ORM (a flush of one object, or building the statement per call, cost
    more than executing it; docs/benchmarks.md, issue 15)."""
    jobs_t = cast(Table, schema.JobRow.__table__)
    queues_t = cast(Table, schema.QueueRow.__table__)
    binds = [bindparam(k, type_=jobs_t.c[k].type) for k in _JOB_COLUMNS]
    chosen = func.coalesce(bindparam("own_priority", type_=Integer), queues_t.c.priority)
    rows = select(*binds, chosen).where(queues_t.c.name == bindparam("queue_name"))
    job = (
        insert(jobs_t)
        .from_select([*(jobs_t.c[k] for k in _JOB_COLUMNS), jobs_t.c.priority], rows)
        .returning(jobs_t.c.seq, jobs_t.c.priority)
    )
    return job, insert(cast(Table, schema.JobEventRow.__table__))


def live_job_named(*, session: Session, queue: str, name: str) -> schema.JobRow | None:
    """The live (not finished) job of that name in that queue, if any: names are unique
    among a queue's live jobs, so `shoal job NAME` means one job."""
    stmt = select(schema.JobRow).where(
        schema.JobRow.queue == queue,
        schema.JobRow.name == name,
        schema.JobRow.phase.not_in(schema.FINISHED_PHASES),
    )
    return session.scalars(stmt).first()


def live_with_origin(*, session: Session, kind: str, namespace: str) -> list[tuple[str, Origin]]:
    """(job id, origin) of every live job, not already being cancelled, that was
    submitted as an object of `kind` in `namespace` (the CR watcher's `cancel_missing`)."""
    stmt = select(schema.JobRow).where(
        schema.JobRow.origin_kind == kind,
        schema.JobRow.origin_namespace == namespace,
        schema.JobRow.phase.not_in(schema.FINISHED_PHASES),
        schema.JobRow.cancel_requested.is_(False),
    )
    return [(row.id, origin) for row in session.scalars(stmt) if (origin := row.origin)]


def _replay_or_refuse(
    session: Session, spec: JobSpec, submitter: str, key: str | None, digest: str
) -> schema.JobRow | None:
    """Whether a live job already has this name: None if not; this very request, stored
    by a concurrent retry (same submitter and key), to answer as a replay; else refused,
    as names are unique among a queue's live jobs."""
    same = live_job_named(session=session, queue=spec.queue, name=spec.name)
    if same is None:
        return None
    existing = None if key is None else _by_key(session, submitter, key)
    if existing is not None:
        return _replay(existing, digest)
    raise errors.Conflict(
        f"queue {spec.queue} already has a live job named {spec.name} (id {same.id}, "
        f"{same.phase}); pick another name, or cancel it first",
        loc=("name",),
    )


def _by_key(session: Session, submitter: str, key: str) -> schema.JobRow | None:
    return session.scalars(
        select(schema.JobRow).where(
            schema.JobRow.submitter == submitter, schema.JobRow.idempotency_key == key
        )
    ).first()


def _replay(existing: schema.JobRow, digest: str) -> schema.JobRow:
    if existing.request_hash != digest:
        raise errors.IdempotencyMismatch(
            "this Idempotency-Key was used before with a different request body",
            loc=("header", "Idempotency-Key"),
        )
    return existing


def get_job(
    *, session: Session, job_id: str, queues: Collection[str] | None = None
) -> schema.JobRow:
    """One job; `NotFound` also when `queues` (the caller's visible queues) excludes it."""
    row = session.scalars(select(schema.JobRow).where(schema.JobRow.id == job_id)).first()
    if row is None or (queues is not None and row.queue not in queues):
        raise errors.NotFound(f"job {job_id} does not exist", loc=("path", "job_id"))
    session.refresh(row)  # another session may have moved it on
    return row


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith("s"):
            raise ValueError
        seq = int(raw[1:])
        if not 0 <= seq < 2**63:  # beyond a BIGINT column: no row has it
            raise ValueError
        return seq
    except ValueError:
        raise errors.Invalid("not a cursor this API returned", loc=("query", "cursor")) from None


def list_jobs(
    *,
    session: Session,
    queues: Collection[str] | None = None,
    queue: str | None = None,
    phase: Phase | None = None,
    submitter: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> JobPage:
    """Jobs newest first, filtered; `queues` restricts to the caller's visible queues.
    Keyset pagination on `seq`: stable while jobs are being submitted."""
    stmt = select(schema.JobRow).order_by(schema.JobRow.seq.desc())
    if queues is not None:
        stmt = stmt.where(schema.JobRow.queue.in_(list(queues)))
    if queue is not None:
        stmt = stmt.where(schema.JobRow.queue == queue)
    if phase is not None:
        stmt = stmt.where(schema.JobRow.phase == phase.value)
    if submitter is not None:
        stmt = stmt.where(schema.JobRow.submitter == submitter)
    if cursor is not None:
        stmt = stmt.where(schema.JobRow.seq < _decode_cursor(cursor))
    limit = max(1, min(limit, MAX_PAGE))
    rows = list(session.scalars(stmt.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return JobPage(rows, _encode_cursor(rows[-1].seq) if more and rows else None)


def cancel_job(
    *,
    session: Session,
    job_id: str,
    by: str,
    queues: Collection[str] | None = None,
    now: datetime | None = None,
) -> schema.JobRow:
    """Cancel: a Pending/Preempted job becomes Cancelled at once; a Scheduled/Running one
    gets `cancel_requested` and the loop stops its workers, then sets Cancelled. Cancelling
    a cancelled job is a no-op; a Succeeded/Failed one raises `Conflict`."""
    for _ in range(_CAS_RETRIES):
        row = get_job(session=session, job_id=job_id, queues=queues)
        phase = Phase(row.phase)
        at = now or schema.utcnow()
        if phase is Phase.CANCELLED or (row.cancel_requested and not phase.finished):
            return row
        if phase.finished:
            raise errors.Conflict(f"job {job_id} already {phase.value}", loc=("path", "job_id"))
        if phase in (Phase.PENDING, Phase.PREEMPTED):
            values: dict[str, Any] = {
                "phase": Phase.CANCELLED.value,
                "finished_at": at,
                "cancel_requested": True,
                "placements": [],
            }
            kind = "Cancelled"
        else:
            values = {"cancel_requested": True}
            kind = "CancelRequested"
        try:
            cas_update(session, job_id=job_id, expected_version=row.version, values=values)
        except errors.VersionConflict:
            continue  # the loop moved it on; decide again on the new state
        add_event(session, job_id=job_id, kind=kind, message=f"by {by}", at=at)
        session.commit()
        session.refresh(row)
        return row
    raise errors.Conflict(f"job {job_id} kept changing; try again", loc=("path", "job_id"))


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
        at = _decode_cursor(cursor)
        stmt = stmt.where(
            schema.JobEventRow.id < at if newest_first else schema.JobEventRow.id > at
        )
    limit = max(1, min(limit, MAX_PAGE))
    rows = list(session.scalars(stmt.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(rows, _encode_cursor(rows[-1].id) if more and rows else None)


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


def count_by_phase(*, session: Session, queues: Collection[str] | None = None) -> dict[str, int]:
    """Number of jobs in each phase (every phase present, zeros included)."""
    stmt = select(schema.JobRow.phase, func.count()).group_by(schema.JobRow.phase)
    if queues is not None:
        stmt = stmt.where(schema.JobRow.queue.in_(list(queues)))
    counts = {p.value: 0 for p in Phase}
    for phase, n in session.execute(stmt):
        counts[phase] = n
    return counts
