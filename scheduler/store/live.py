"""The live jobs (Pending, Preempted, Scheduled, Running) read as the loop sees them:
`LiveJob`s with their parsed specs and core requests, oldest first.

A cycle reads every live job, so the read is incremental: a reader's `LiveCache` keeps
what it built last time and only rows whose `version` moved are read and parsed again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, Select, Text, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import STORED, JobSpec, Origin, Phase
from scheduler.store import convert, schema
from scheduler.store.rows import id_chunks

LIVE = (Phase.PENDING, Phase.SCHEDULED, Phase.RUNNING, Phase.PREEMPTED)
HOLDS_GPUS = (Phase.SCHEDULED, Phase.RUNNING)


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
    resized_at: datetime | None = None  # an elastic job's last resize

    def running(self) -> model.RunningJob | None:
        """As a core `RunningJob` when it holds GPUs (Scheduled or Running), else None."""
        if self.phase not in HOLDS_GPUS:
            return None
        since = self.started_at or self.scheduled_at
        return model.RunningJob(
            self.request,
            self.placements,
            since.timestamp() if since else 0.0,
            attempt=self.attempt,
            resized_at=self.resized_at.timestamp() if self.resized_at else None,
        )


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
    (`rows.cas_update`, `batches.write`), so a live job whose version
    has not moved is the job read before. One cache per reader of one database: the
    simulator's job ids repeat across its throw-away databases."""

    __slots__ = ("jobs", "parsed")

    def __init__(self) -> None:
        self.jobs: dict[str, LiveJob] = {}
        # Each job's spec parsed (pydantic) and its core request, with the stored values
        # they were made from: a version bump that left the spec alone (a phase, a
        # reason) re-uses them. Checked by value.
        self.parsed: dict[str, _Parsed] = {}

    def emptied(self) -> LiveCache:
        """A cache to which every row is stale (a full read), keeping the parsed specs:
        those are reused only where the stored values they were made from are the same."""
        out = LiveCache()
        out.parsed = self.parsed
        return out


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
    current = _ids_and_versions(session)
    jobs = cache.jobs
    stale = {
        jid for jid, version in current if (hit := jobs.get(jid)) is None or hit.version != version
    }
    rows = []
    for chunk in id_chunks(stale):
        rows.extend(session.execute(_FULL.where(live, j.id.in_(chunk))))
    # A stale row that left the live phases meanwhile, or cannot be read, is left out.
    by_id = {lj.id: lj for lj in _read(rows, cache, unreadable)}
    out = [lj for jid, _ in current if (lj := by_id.get(jid) if jid in stale else jobs[jid])]
    jobs.update(by_id)
    if len(jobs) != len(out):  # some are no longer live: forget them
        cache.jobs = {lj.id: lj for lj in out}
        cache.parsed = {k: v for k, v in cache.parsed.items() if k in cache.jobs}
    return out


def _ids_and_versions(session: Session) -> list[tuple[str, int]]:
    """(id, version) of every live job, oldest first: the one read a cycle makes of every
    live row, so straight through the driver's cursor (no per-row result objects)."""
    phases = ", ".join(f"'{p.value}'" for p in LIVE)
    sql = f"SELECT id, version FROM jobs WHERE phase IN ({phases}) ORDER BY seq"
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(sql)
        return [(jid, version) for jid, version in cursor.fetchall()]
    finally:
        cursor.close()


def _version(cache: LiveCache, job_id: str) -> int | None:
    hit = cache.jobs.get(job_id)
    return None if hit is None else hit.version


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
        j.resized_at,
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
                resized_at=row.resized_at,
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
