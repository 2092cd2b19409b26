"""What the scheduler loop reads and writes: live jobs as core types, placements, phases,
pending reasons, events, the node inventory and the single-scheduler lease.

The loop is the only writer of placements. Every write checks the job's version
(`expected_version`, from `LiveJob.version`) and raises `errors.VersionConflict` when the
job moved on meanwhile (a user cancelled it, another scheduler wrote first): the loop
then re-reads rather than overwrite. Each function commits its own transaction and
returns the job's new version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import Row, Select, Table, Text, bindparam, delete, func, select, update
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import STORED, JobSpec, Origin, Phase
from scheduler.store import convert, errors, jobs, schema

_NodeRow = TypeVar("_NodeRow", schema.InventoryRow, schema.CapacityRow)
LIVE = (Phase.PENDING, Phase.SCHEDULED, Phase.RUNNING, Phase.PREEMPTED)

# Which phase may follow which; Pending -> Scheduled only through `record_placement`.
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.PENDING: frozenset({Phase.CANCELLED, Phase.FAILED}),
    Phase.SCHEDULED: frozenset(
        {
            Phase.RUNNING,
            Phase.PENDING,
            Phase.PREEMPTED,
            Phase.SUCCEEDED,
            Phase.FAILED,
            Phase.CANCELLED,
        }
    ),
    Phase.RUNNING: frozenset(
        {Phase.SUCCEEDED, Phase.FAILED, Phase.PREEMPTED, Phase.PENDING, Phase.CANCELLED}
    ),
    Phase.PREEMPTED: frozenset({Phase.PENDING, Phase.CANCELLED, Phase.FAILED}),
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.CANCELLED: frozenset(),
}
_HOLDS_GPUS = (Phase.SCHEDULED, Phase.RUNNING)


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job the loop must look at, with everything it needs to decide and to launch."""

    id: str
    version: int
    phase: Phase
    spec: JobSpec
    request: model.JobRequest
    placements: tuple[model.WorkerPlacement, ...]
    attempt: int
    restarts: int
    cancel_requested: bool
    scheduled_at: datetime | None
    started_at: datetime | None
    origin: Origin | None = None  # the TrainingJob it was submitted as, if it was

    def running(self) -> model.RunningJob | None:
        """As a core `RunningJob` when it holds GPUs (Scheduled or Running), else None."""
        if self.phase not in _HOLDS_GPUS:
            return None
        since = self.started_at or self.scheduled_at
        return model.RunningJob(
            self.request,
            self.placements,
            since.timestamp() if since else 0.0,
            attempt=self.attempt,
        )


def load_queues(*, session: Session) -> tuple[model.Queue, ...]:
    rows = session.scalars(select(schema.QueueRow).order_by(schema.QueueRow.name))
    return tuple(convert.queue(r) for r in rows)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A live job whose stored row cannot be turned into a spec (a value an older version
    let in): the loop makes that its reason rather than failing the cycle for everyone."""

    id: str
    phase: Phase
    error: str


class LiveCache:
    """What one reader (a loop) last read of the live jobs, so that its next read builds
    only the rows that changed. Every write of a job row bumps its `version`
    (`jobs.cas_update`, `set_pending_reasons`), so a live job whose version has not moved
    is the job read before. One cache per reader of one database: the simulator's job ids
    repeat across its throw-away databases."""

    __slots__ = ("jobs", "parsed")

    def __init__(self) -> None:
        self.jobs: dict[str, LiveJob] = {}
        # Each job's spec parsed (pydantic) and its core request, with the stored values
        # they were made from: a version bump that left the spec alone (a phase, a
        # reason) re-uses them. Checked by value.
        self.parsed: dict[str, _Parsed] = {}


def live_jobs(
    *,
    session: Session,
    unreadable: list[Unreadable] | None = None,
    cache: LiveCache | None = None,
) -> list[LiveJob]:
    """Pending, Preempted, Scheduled and Running jobs, oldest first, with their specs.
    With `unreadable`, a row that cannot be read is appended there and left out; without
    it, the error propagates. With `cache`, only the rows whose version moved since the
    last read through that cache are read whole (the rest are the jobs read then)."""
    j = schema.JobRow
    live = j.phase.in_([p.value for p in LIVE])
    if cache is None:
        reader = _shared
        rows = list(session.execute(_FULL.where(live).order_by(j.seq)))
        fresh = _read(rows, reader, unreadable)
        reader.parsed = {lj.id: reader.parsed[lj.id] for lj in fresh}
        return fresh
    current = session.execute(select(j.id, j.version).where(live).order_by(j.seq)).all()
    stale = {jid for jid, version in current if _version(cache, jid) != version}
    rows = []
    for chunk in _chunks(sorted(stale)):
        rows.extend(session.execute(_FULL.where(live, j.id.in_(chunk))))
    # A stale row that left the live phases meanwhile, or cannot be read, is left out.
    by_id = {lj.id: lj for lj in _read(rows, cache, unreadable)}
    out = []
    for jid, _ in current:
        lj = by_id.get(jid) if jid in stale else cache.jobs[jid]
        if lj is not None:
            out.append(lj)
    cache.jobs = {lj.id: lj for lj in out}
    cache.parsed = {k: v for k, v in cache.parsed.items() if k in cache.jobs}
    return out


def _version(cache: LiveCache, job_id: str) -> int | None:
    hit = cache.jobs.get(job_id)
    return None if hit is None else hit.version


def _chunks(ids: list[str], size: int = 500) -> list[list[str]]:
    # Bounded IN lists: old SQLite builds allow 999 bound parameters.
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _full_select() -> Select[Any]:
    j = schema.JobRow
    return select(
        j.id,
        j.version,
        j.phase,
        sql_cast(j.spec, Text).label("spec_text"),
        j.queue,
        j.priority,
        j.created_at,
        j.name,
        j.placements,
        j.attempt,
        j.restarts,
        j.cancel_requested,
        j.scheduled_at,
        j.started_at,
        j.origin_kind,
        j.origin_namespace,
        j.origin_name,
        j.origin_uid,
    )


_FULL = _full_select()


def _read(
    rows: Sequence[Row[Any]], cache: LiveCache, unreadable: list[Unreadable] | None
) -> list[LiveJob]:
    out = []
    for row in rows:
        try:
            spec, request = _parse(row, cache)
            lj = LiveJob(
                id=row.id,
                version=row.version,
                phase=Phase(row.phase),
                spec=spec,
                request=request,
                placements=convert.placements(row.placements),
                attempt=row.attempt,
                restarts=row.restarts,
                cancel_requested=row.cancel_requested,
                scheduled_at=row.scheduled_at,
                started_at=row.started_at,
                origin=None
                if row.origin_kind is None
                else Origin(
                    row.origin_kind,
                    row.origin_namespace or "",
                    row.origin_name or "",
                    row.origin_uid or "",
                ),
            )
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            if unreadable is None:
                raise
            unreadable.append(Unreadable(row.id, Phase(row.phase), f"{type(exc).__name__}: {exc}"))
            continue
        out.append(lj)
    return out


_Parsed = tuple[str, str, int, datetime, str, JobSpec, model.JobRequest]
# Readers without a cache of their own (the API's reads) share the parsed specs.
_shared = LiveCache()


def _parse(row: Row[Any], cache: LiveCache) -> tuple[JobSpec, model.JobRequest]:
    key = (row.spec_text, row.queue, row.priority, row.created_at, row.name)
    hit = cache.parsed.get(row.id)
    if hit is not None and hit[:5] == key:
        return hit[5], hit[6]
    spec = JobSpec.model_validate(json.loads(row.spec_text), context=STORED)
    # `job_request` reads only the columns selected above.
    request = convert.job_request(cast(schema.JobRow, row), spec)
    cache.parsed[row.id] = (*key, spec, request)
    return spec, request


def _condition(phase: Phase, reason: str, message: str, at: datetime) -> dict[str, Any]:
    return {
        "type": phase.value,
        "status": "True",
        "reason": reason or phase.value,
        "message": message,
        "lastTransitionTime": at.isoformat(),
    }


def _current(session: Session, job_id: str) -> schema.JobRow:
    stmt = (
        select(schema.JobRow)
        .where(schema.JobRow.id == job_id)
        .execution_options(populate_existing=True)
    )
    row = session.scalars(stmt).first()
    if row is None:
        raise errors.NotFound(f"job {job_id} does not exist", loc=("id",))
    return row


def record_placement(
    *,
    session: Session,
    job_id: str,
    expected_version: int,
    placements: Sequence[model.WorkerPlacement],
    attempt: int,
    now: datetime | None = None,
) -> int:
    """Pending -> Scheduled with every worker's placement, written BEFORE launching so a
    crash after it cannot place the job twice. `attempt` numbers this launch (the backend
    makes a repeat launch of one attempt a no-op)."""
    row = _current(session, job_id)
    if row.phase != Phase.PENDING.value:
        raise errors.InvalidTransition(f"job {job_id} is {row.phase}, not Pending")
    if row.cancel_requested:
        raise errors.InvalidTransition(f"job {job_id} is being cancelled")
    at = now or schema.utcnow()
    data = convert.placements_json(placements)
    version = jobs.cas_update(
        session,
        job_id=job_id,
        expected_version=expected_version,
        values={
            "phase": Phase.SCHEDULED.value,
            "placements": data,
            "attempt": attempt,
            "scheduled_at": at,
            "started_at": None,
            "pending_code": None,
            "pending_message": None,
            "pending_details": None,
            "conditions": [*row.conditions, _condition(Phase.SCHEDULED, "", "", at)][-20:],
        },
    )
    nodes = sorted({p.node for p in placements})
    jobs.add_event(
        session,
        job_id=job_id,
        kind="Scheduled",
        message=f"attempt {attempt} on {', '.join(nodes)}",
        data={"attempt": attempt, "placements": data},
        at=at,
    )
    session.commit()
    return version


def set_phase(
    *,
    session: Session,
    job_id: str,
    expected_version: int,
    phase: Phase,
    reason: str = "",
    message: str = "",
    count_restart: bool = False,
    now: datetime | None = None,
) -> int:
    """Move a job along its life cycle (see `TRANSITIONS`). Leaving Scheduled/Running
    releases its placements; Running stamps started_at, a finished phase finished_at;
    `count_restart` adds one to `restarts` (a failed attempt that will be retried)."""
    row = _current(session, job_id)
    current = Phase(row.phase)
    if phase not in TRANSITIONS[current]:
        raise errors.InvalidTransition(f"job {job_id} cannot go from {current} to {phase}")
    at = now or schema.utcnow()
    values: dict[str, Any] = {
        "phase": phase.value,
        "conditions": [*row.conditions, _condition(phase, reason, message, at)][-20:],
    }
    if phase is Phase.RUNNING:
        values["started_at"] = at
    if phase not in _HOLDS_GPUS:
        values["placements"] = []
    if phase in (Phase.PENDING, Phase.PREEMPTED):
        values.update(scheduled_at=None, started_at=None)
    if phase.finished:
        values["finished_at"] = at
    if count_restart:
        values["restarts"] = row.restarts + 1
    version = jobs.cas_update(
        session, job_id=job_id, expected_version=expected_version, values=values
    )
    jobs.add_event(session, job_id=job_id, kind=phase.value, reason=reason, message=message, at=at)
    session.commit()
    return version


def set_pending_reason(
    *,
    session: Session,
    job_id: str,
    reason: model.PendingReason,
    expected_version: int | None = None,
) -> int:
    """Why a Pending job waits. An unchanged reason writes nothing (no version bump), so
    a loop that repeats the reason every cycle does not race users' cancels."""
    row = _current(session, job_id)
    if row.phase != Phase.PENDING.value:
        raise errors.InvalidTransition(f"job {job_id} is {row.phase}, not Pending")
    details = {str(k): v for k, v in reason.details.items()}
    if (row.pending_code, row.pending_message, row.pending_details) == (
        reason.code.value,
        reason.message,
        details,
    ):
        return row.version
    version = jobs.cas_update(
        session,
        job_id=job_id,
        expected_version=row.version if expected_version is None else expected_version,
        values={
            "pending_code": reason.code.value,
            "pending_message": reason.message,
            "pending_details": details,
        },
    )
    session.commit()
    return version


def set_pending_reasons(
    *, session: Session, reasons: Sequence[tuple[str, int, model.PendingReason]]
) -> list[str]:
    """Many Pending jobs' reasons, (job id, expected version, reason) each, in one
    transaction with no read first: a cycle changes the reasons of many waiting jobs at
    once (the free room named in them moved), and a read, write and commit per job was
    most of its store time. Returns the ids written. A job whose row did not match (moved
    on, no longer Pending, or the same code and message stored already) goes through
    `set_pending_reason` afterwards, which decides it on its own (a repeat is no write)."""
    if not reasons:
        return []
    t = cast(Table, schema.JobRow.__table__)
    stmt = (
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
    written, missed = [], []
    conn = session.connection()
    for job_id, version, r in reasons:
        params = {
            "b_id": job_id,
            "b_version": version,
            "b_code": r.code.value,
            "b_message": r.message,
            "b_details": {str(k): v for k, v in r.details.items()},
        }
        if conn.execute(stmt, params).rowcount == 1:
            written.append(job_id)
        else:
            missed.append((job_id, r))
    session.commit()
    for job_id, reason in missed:
        try:
            set_pending_reason(session=session, job_id=job_id, reason=reason)
        except (errors.VersionConflict, errors.InvalidTransition, errors.NotFound):
            continue
        written.append(job_id)
    return written


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
    _current(session, job_id)
    jobs.add_event(
        session, job_id=job_id, kind=kind, reason=reason, message=message, data=data, at=now
    )
    session.commit()


def save_inventory(
    *, session: Session, nodes: Sequence[model.Node], now: datetime | None = None
) -> None:
    """Replace the inventory with `nodes` (those not listed are gone). Only rows that
    changed are written (`seen_at`: when a row last changed): at 1,000 nodes a row-by-row
    merge cost ~2 s a cycle while one node's free capacity moved."""
    _replace_nodes(session, schema.InventoryRow, nodes, now)


def save_capacity(
    *, session: Session, nodes: Sequence[model.Node], now: datetime | None = None
) -> None:
    """Replace what each node could hold if empty (`schema.CapacityRow`), as
    `save_inventory` does the free room."""
    _replace_nodes(session, schema.CapacityRow, nodes, now)


def _replace_nodes(
    session: Session,
    table: type[_NodeRow],
    nodes: Sequence[model.Node],
    now: datetime | None,
) -> None:
    at = now or schema.utcnow()
    names = [n.name for n in nodes]
    session.execute(delete(table).where(table.name.not_in(names)))
    rows = {r.name: r for r in session.scalars(select(table))}
    for n in nodes:
        values = {
            "cpu_milli": n.cpu_milli,
            "memory_mib": n.memory_mib,
            "gpu_count": n.gpu_count,
            "gpu_model": n.gpu_model,
            "gpu_memory_mib": n.gpu_memory_mib,
            "enforcement": str(n.enforcement),
            "slices": n.slices,
        }
        if table is schema.InventoryRow:  # capacity is the node as if empty: no such flag;
            values["no_sharing"] = n.no_sharing  # admission does not read labels and taints
            values["labels"] = dict(n.labels)
            values["taints"] = convert.taints_json(n.taints)
        row = rows.get(n.name)
        if row is None:
            session.add(table(name=n.name, seen_at=at, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            row.seen_at = at
    session.commit()


def load_inventory(*, session: Session) -> tuple[model.Node, ...]:
    rows = session.scalars(select(schema.InventoryRow).order_by(schema.InventoryRow.name))
    return tuple(convert.node(r) for r in rows)


def load_capacity(*, session: Session) -> tuple[model.Node, ...]:
    """Every node as it would be empty, for admission's "can never run"; the inventory
    until a scheduler has written capacity (one older than it, or none yet)."""
    rows = session.scalars(select(schema.CapacityRow).order_by(schema.CapacityRow.name))
    return tuple(convert.node(r) for r in rows) or load_inventory(session=session)


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
