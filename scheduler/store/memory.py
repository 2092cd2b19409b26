"""The loop's port in memory: `MemoryStore` keeps jobs, their events and reasons, queues
and nodes in dicts and is a `port.LiveStore` with the rules of `store.changes`, so
`shoal simulate` replays a trace with no database. One process and one loop: no lease to
share, no transaction to roll back, nothing kept across restarts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime

from scheduler import model
from scheduler.core import request
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import convert, errors
from scheduler.store.changes import (
    Ended,
    EventWrite,
    JobEvent,
    JobWrite,
    Move,
    NewAttempt,
    Result,
    Waits,
    after,
    refusal,
)
from scheduler.store.live import LIVE, LiveCache, LiveJob, Unreadable
from scheduler.store.queues import quota_json
from scheduler.store.resizes import RESIZED


class MemoryStore:
    """Jobs by id (the live ones in submission order: a job requeued keeps its place),
    with what the loop reads back of each."""

    def __init__(self) -> None:
        self.live: dict[str, LiveJob] = {}
        self.ended_jobs: dict[str, tuple[LiveJob, datetime]] = {}  # with when it ended
        self.reasons: dict[str, model.PendingReason] = {}
        self.last_move: dict[str, str] = {}  # job id -> the reason of its last move
        self.events: dict[str, list[JobEvent]] = {}
        self.queues: dict[str, model.Queue] = {}
        self.inventory: tuple[model.Node, ...] = ()
        self.capacity: tuple[model.Node, ...] = ()
        self.draining: tuple[model.RunningJob, ...] = ()

    @property
    def storage(self) -> MemoryStore:
        """What a loop runs on: this store itself (a database opens a session instead)."""
        return self

    # What a front door does (the simulator's arrivals).
    def add_queue(self, spec: QueueSpec) -> None:
        """A queue, as `store.create_queue` stores and `load_queues` reads it."""
        guaranteed = quota_json(spec.guaranteed) or {"total": None}
        self.queues[spec.name] = model.Queue(
            name=spec.name,
            guaranteed=convert.quota(guaranteed, unlimited=False),
            limit=convert.quota(quota_json(spec.limit), unlimited=True),
            weight=spec.weight,
            priority=spec.priority,
            parent=spec.parent,
        )

    def submit(self, spec: JobSpec, *, job_id: str, now: datetime, by: str = "") -> LiveJob:
        """A new Pending job with its queue's priority unless it names its own."""
        queue = self.queues.get(spec.queue)
        if queue is None:
            raise errors.NotFound(f"queue {spec.queue!r} does not exist", loc=("queue",))
        priority = queue.priority if spec.priority is None else spec.priority
        core = request.job_request(spec, job_id=job_id, name=spec.name, queue=spec.queue,
                                   priority=priority, submitted_at=now.timestamp())  # fmt: skip
        job = LiveJob(job_id, 1, Phase.PENDING, spec, core, (), 0, 0, False, None, None)
        self.live[job_id] = job
        self.events[job_id] = [JobEvent("Submitted", "", f"by {by}", {}, now)]
        return job

    def cancel(self, job_id: str, *, now: datetime, by: str = "") -> LiveJob:
        """As `store.cancel_job`: a Pending or Preempted job is Cancelled at once; a
        Scheduled or Running one is marked, and the loop stops its workers."""
        job = self._job(job_id)
        if job.phase is Phase.CANCELLED or (job.cancel_requested and not job.phase.finished):
            return job
        if job.phase.finished:
            raise errors.Conflict(f"job {job_id} already {job.phase.value}", loc=("path", "job_id"))
        job = dataclasses.replace(job, version=job.version + 1, cancel_requested=True)
        if job.phase in (Phase.PENDING, Phase.PREEMPTED):
            job = dataclasses.replace(job, phase=Phase.CANCELLED, placements=())
            self._event(EventWrite(job_id, "Cancelled", "", f"by {by}"), now)
        else:
            self._event(EventWrite(job_id, "CancelRequested", "", f"by {by}"), now)
        self._keep(job, now)
        return job

    # Reads.
    def live_jobs(
        self, *, unreadable: list[Unreadable] | None = None, cache: LiveCache | None = None
    ) -> list[LiveJob]:
        out = list(self.live.values())
        if cache is not None:  # the loop's cache takes its writes over from what it read
            cache.jobs = dict(self.live)
        return out

    def load_queues(self) -> tuple[model.Queue, ...]:
        return tuple(self.queues[name] for name in sorted(self.queues))

    def load_inventory(self) -> tuple[model.Node, ...]:
        return self.inventory

    def ended(self, *, job_id: str) -> Ended:
        job = self._job(job_id)
        grace = float(job.spec.termination_grace_period_seconds)
        return Ended(job.phase, grace, self.last_move.get(job_id, ""))

    def list_events(self, *, job_id: str) -> list[JobEvent]:
        return list(self.events.get(job_id, ()))

    # The cluster as the backend reports it.
    def save_inventory(self, *, nodes: Sequence[model.Node], now: datetime | None = None) -> None:
        self.inventory = tuple(nodes)

    def save_capacity(self, *, nodes: Sequence[model.Node], now: datetime | None = None) -> None:
        self.capacity = tuple(nodes)

    def record_draining(self, *, stopping: Sequence[model.RunningJob], now: datetime) -> None:
        self.draining = tuple(stopping)

    # The jobs' changes.
    def write(self, *, writes: Sequence[JobWrite], now: datetime) -> list[Result]:
        return [self._write(w, now) for w in writes]

    def _write(self, w: JobWrite, now: datetime) -> Result:
        job_id, c = w.job.id, w.change
        try:
            current = self._job(job_id)  # an ended one: `refusal` says why not
        except errors.NotFound as gone:
            return gone
        if isinstance(c, Waits):
            return self._waits(current, c.reason)
        why = refusal(job_id, current.phase, current.cancel_requested, c)
        if why is not None:  # what the job is now refuses it, as the SQL store checks first
            return why
        if current.version != w.job.version:
            return errors.VersionConflict(job_id, w.job.version, current.version)
        if w.event is not None:
            self._event(w.event, now)
        job = after(current, c, now)
        if isinstance(c, Move):
            self._event(EventWrite(job_id, c.phase.value, c.reason, c.message), now)
            self.last_move[job_id] = c.reason or c.phase.value
            if c.phase is not Phase.PENDING:
                self.reasons.pop(job_id, None)
        elif isinstance(c, NewAttempt):
            self._event(EventWrite(job_id, "Scheduled", "", f"attempt {c.attempt}"), now)
            self.reasons.pop(job_id, None)  # a new attempt clears the reason it waited for
        else:
            self._event(EventWrite(job_id, RESIZED, "", c.reason), now)
        self._keep(job, now)
        return job

    def _waits(self, current: LiveJob, reason: model.PendingReason) -> Result:
        """The reason, written whatever the version; the same one again is no write."""
        why = refusal(current.id, current.phase, current.cancel_requested, Waits(reason))
        if why is not None:
            return why
        if self.reasons.get(current.id) == reason:
            return current
        self.reasons[current.id] = reason
        job = self.live[current.id] = dataclasses.replace(current, version=current.version + 1)
        return job

    def append_events(self, *, events: Sequence[EventWrite], now: datetime) -> None:
        for e in events:
            if e.job_id in self.events:  # a job deleted meanwhile has none to take it
                self._event(e, now)

    def note_waiting(self, *, job_id: str, reason: model.PendingReason) -> None:
        got = self._waits(self._job(job_id), reason)
        if isinstance(got, Exception):
            raise got

    def _event(self, e: EventWrite, at: datetime) -> None:
        said = JobEvent(e.kind, e.reason, e.message, dict(e.data or {}), at)
        self.events.setdefault(e.job_id, []).append(said)

    def _keep(self, job: LiveJob, now: datetime) -> None:
        """Hold `job` as it now is: among the live ones (in its place), else ended at `now`."""
        if job.phase in LIVE:
            self.live[job.id] = job
        else:
            self.live.pop(job.id, None)
            self.ended_jobs[job.id] = (job, now)

    def _job(self, job_id: str) -> LiveJob:
        job = self.live.get(job_id) or self.ended_jobs.get(job_id, (None, None))[0]
        if job is None:
            raise errors.NotFound(f"job {job_id} does not exist", loc=("id",))
        return job

    # One loop, one process: the lease is always this loop's.
    def acquire_lease(self, *, holder: str, ttl_s: float) -> bool:
        return True

    def release_lease(self, *, holder: str) -> None:
        return None

    # Retention.
    def purge_finished(self, *, finished_before: datetime) -> list[str]:
        gone = [j for j, (_, at) in self.ended_jobs.items() if at < finished_before]
        for job_id in gone:
            del self.ended_jobs[job_id]
            for kept in (self.events, self.reasons, self.last_move):
                kept.pop(job_id, None)
        return gone

    def deleted_among(self, *, job_ids: Collection[str]) -> set[str]:
        return {j for j in job_ids if j not in self.live and j not in self.ended_jobs}

    def rollback(self) -> None:
        return None
