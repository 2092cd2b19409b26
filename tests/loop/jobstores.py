"""Where a loop test's jobs live: in memory (`store.memory.MemoryStore`: the loop's logic,
no database) or in a database (what only a database keeps: row versions, the lease,
rows an older version wrote). The few things a test does beside the loop, on either:
submit a job, cancel it, read its phase and its events."""

from __future__ import annotations

import uuid

from scheduler.clock import as_datetime
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.jobs import cancel_job
from scheduler.store.memory import MemoryStore
from scheduler.store.port import Storage, opened
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job


def add_queue(storage: Storage, spec: QueueSpec) -> None:
    if isinstance(storage, MemoryStore):
        storage.add_queue(spec)
        return
    with storage.session() as s:
        create_queue(session=s, spec=spec)


def submit(storage: Storage, spec: JobSpec, now: float) -> str:
    at = as_datetime(now)
    if isinstance(storage, MemoryStore):
        return storage.submit(spec, job_id=uuid.uuid4().hex[:16], now=at, by="t").id
    with storage.session() as s:
        return submit_job(session=s, spec=spec, submitter="t", now=at)[0].id


def cancel(storage: Storage, job_id: str, now: float) -> None:
    if isinstance(storage, MemoryStore):
        storage.cancel(job_id, now=as_datetime(now), by="t")
        return
    with storage.session() as s:
        cancel_job(session=s, job_id=job_id, by="t", now=as_datetime(now))


def phase(storage: Storage, job_id: str) -> Phase:
    if isinstance(storage, MemoryStore):
        return storage.ended(job_id=job_id).phase
    with storage.session() as s:
        return Phase(get_job(session=s, job_id=job_id).phase)


def events(storage: Storage, job_id: str) -> list[tuple[str, str, str]]:
    """The job's events: (kind, reason, message), oldest first."""
    with opened(storage) as port:
        return [(e.kind, e.reason, e.message) for e in port.list_events(job_id=job_id)]
