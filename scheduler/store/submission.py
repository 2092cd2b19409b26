"""Submitting a job: one INSERT that also reads its queue's priority, made idempotent by
(submitter, Idempotency-Key) and kept unique by name among a queue's live jobs. The
unique indexes decide a race; the loser answers as a replay or is refused.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Insert, Integer, Table, bindparam, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scheduler.spec import JobSpec, Origin, Phase, spec_json
from scheduler.store import errors, schema


def request_hash(spec: JobSpec) -> str:
    """Idempotency fingerprint: same validated spec -> same hash, whatever key order."""
    canonical = json.dumps(spec_json(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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
    values = _row_values(spec, submitter, idempotency_key, digest, at, origin, job_id)
    for _ in range(NAME_RACE_TRIES):
        try:
            stored = _insert(session, values, spec.priority)
            break
        except IntegrityError as exc:
            # The unique indexes decide, not a read before the insert (one statement less
            # per submission): a live job of this name, or a concurrent retry of this
            # key, won.
            session.rollback()
            clash = _clash(session, spec, submitter, idempotency_key, digest)
            if clash is not None:
                return clash, False
            if not _name_index_refused(exc):
                raise
            # The job that held the name ended between the refusal and the re-read: the
            # name is free now, so this submission tries again (issue 35).
    else:
        raise errors.Conflict(
            f"the name {spec.name} in queue {spec.queue} was taken and freed again "
            f"{NAME_RACE_TRIES} times while this job was submitted; try again",
            loc=("name",),
        )
    if stored is None:
        session.rollback()
        raise errors.NotFound(f"queue {spec.queue!r} does not exist", loc=("queue",))
    seq, priority = stored
    event = {"at": at, "kind": "Submitted", "reason": "", "message": f"by {submitter}"}
    session.execute(_submit_statements()[1], {"job_id": values["id"], "data": {}, **event})
    session.commit()
    return schema.JobRow(seq=seq, priority=priority, **values), True


def _row_values(
    spec: JobSpec,
    submitter: str,
    idempotency_key: str | None,
    digest: str,
    at: datetime,
    origin: Origin | None,
    job_id: str | None,
) -> dict[str, Any]:
    """The new job's columns (all but `seq` and `priority`, which the INSERT decides)."""
    return {
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


# Inserts of one submission whose name was taken and freed again before the re-read could
# say by whom; each retry needs a new job of that name to start and end in that window.
NAME_RACE_TRIES = 3


def _name_index_refused(exc: IntegrityError) -> bool:
    """Whether the unique index on a queue's live names refused the INSERT (psycopg names
    the constraint; SQLite only its columns)."""
    constraint = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)
    if constraint is not None:
        return bool(constraint == "uq_jobs_live_name")
    return "jobs.queue, jobs.name" in str(exc.orig)


def _clash(
    session: Session, spec: JobSpec, submitter: str, key: str | None, digest: str
) -> schema.JobRow | None:
    """After a unique index refused the INSERT: the job that won, as a replay of this
    request, or None when it was not a name or key clash."""
    won = None if key is None else _by_key(session, submitter, key)
    if won is not None:
        return _replay(won, digest)
    return _replay_or_refuse(session, spec, submitter, key, digest)


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
