"""The store as the scheduler loop needs it, and nothing more: `LiveStore` lists every
read and write the loop makes (one session's worth), in the loop's own types (live jobs,
`changes.JobWrite`s in and the jobs as written out, events, nodes, queues): no rows, no
columns. `SqlLiveStore` is that port on SQL (each call a store function on the port's
session; the jobs' changes through `batches.write`), `memory.MemoryStore` the same in
memory (the simulator's). `opened` gives a loop the port on either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Protocol

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import (
    batches,
    cluster,
    draining,
    events,
    lease,
    live,
    retention,
    rows,
)
from scheduler.store import transitions as moves
from scheduler.store.changes import Ended, EventWrite, JobEvent, JobWrite, Result
from scheduler.store.db import Database, Session
from scheduler.store.live import LiveCache, LiveJob, Unreadable
from scheduler.store.memory import MemoryStore

log = logging.getLogger(__name__)


class LiveStore(Protocol):
    """What one cycle of the scheduler loop reads and writes. A job's change is written
    against the version it was read at; one that moved on meanwhile gets its
    `errors.MOVED_ON` error back instead of the job as it now reads."""

    # Reads.
    def live_jobs(
        self, *, unreadable: list[Unreadable] | None = None, cache: LiveCache | None = None
    ) -> list[LiveJob]: ...
    def load_queues(self) -> tuple[model.Queue, ...]: ...
    def load_inventory(self) -> tuple[model.Node, ...]: ...
    def ended(self, *, job_id: str) -> Ended:
        """How a job no longer live ended (`errors.NotFound`: deleted)."""
        ...

    def list_events(self, *, job_id: str) -> list[JobEvent]: ...

    # The cluster as the backend reports it.
    def save_inventory(
        self, *, nodes: Sequence[model.Node], now: datetime | None = None
    ) -> None: ...
    def save_capacity(
        self, *, nodes: Sequence[model.Node], now: datetime | None = None
    ) -> None: ...
    def record_draining(self, *, stopping: Sequence[model.RunningJob], now: datetime) -> None: ...

    # The jobs' changes (`store.batches`): many in one transaction where they can be,
    # one by one should that fail (one job's trouble then stays its own).
    def write(self, *, writes: Sequence[JobWrite], now: datetime) -> list[Result]: ...
    def append_events(self, *, events: Sequence[EventWrite], now: datetime) -> None: ...
    def note_waiting(self, *, job_id: str, reason: model.PendingReason) -> None:
        """Why a job waits, whatever its version (a job the loop holds no copy of);
        `errors.InvalidTransition` when it is not Pending."""
        ...

    # The single-scheduler lease.
    def acquire_lease(self, *, holder: str, ttl_s: float) -> bool: ...
    def release_lease(self, *, holder: str) -> None: ...

    # Retention.
    def purge_finished(self, *, finished_before: datetime) -> list[str]: ...
    def deleted_among(self, *, job_ids: Collection[str]) -> set[str]: ...

    def rollback(self) -> None:
        """Drop what a failed step left half-done (one job's trouble is that job's)."""
        ...


class SqlLiveStore:
    """`LiveStore` on the SQL store, for one session: each call is the store function of
    the same name (each commits its own transaction)."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def live_jobs(
        self, *, unreadable: list[Unreadable] | None = None, cache: LiveCache | None = None
    ) -> list[LiveJob]:
        return live.live_jobs(session=self.session, unreadable=unreadable, cache=cache)

    def load_queues(self) -> tuple[model.Queue, ...]:
        return cluster.load_queues(session=self.session)

    def load_inventory(self) -> tuple[model.Node, ...]:
        return cluster.load_inventory(session=self.session)

    def ended(self, *, job_id: str) -> Ended:
        row = rows.get_job(session=self.session, job_id=job_id)
        grace = float(int(row.spec.get("terminationGracePeriodSeconds", 30)))
        last = row.conditions[-1].get("reason", "") if row.conditions else ""
        return Ended(Phase(row.phase), grace, last)

    def list_events(self, *, job_id: str) -> list[JobEvent]:
        return [
            JobEvent(e.kind, e.reason, e.message, e.data or {}, e.at)
            for e in events.list_events(session=self.session, job_id=job_id)
        ]

    def save_inventory(self, *, nodes: Sequence[model.Node], now: datetime | None = None) -> None:
        cluster.save_inventory(session=self.session, nodes=nodes, now=now)

    def save_capacity(self, *, nodes: Sequence[model.Node], now: datetime | None = None) -> None:
        cluster.save_capacity(session=self.session, nodes=nodes, now=now)

    def record_draining(self, *, stopping: Sequence[model.RunningJob], now: datetime) -> None:
        draining.record(session=self.session, stopping=stopping, now=now)

    def write(self, *, writes: Sequence[JobWrite], now: datetime) -> list[Result]:
        try:
            return batches.write(session=self.session, writes=writes, now=now)
        except Exception as exc:
            self.session.rollback()
            if len(writes) == 1:
                return [exc]
            log.warning("writing %d jobs at once failed (%s); one by one", len(writes), exc)
        out: list[Result] = []
        for w in writes:
            try:
                out += batches.write(session=self.session, writes=[w], now=now)
            except Exception as exc:
                self.session.rollback()
                out.append(exc)
        return out

    def append_events(self, *, events: Sequence[EventWrite], now: datetime) -> None:
        batches.append_events(session=self.session, events=events, now=now)

    def note_waiting(self, *, job_id: str, reason: model.PendingReason) -> None:
        moves.set_pending_reason(session=self.session, job_id=job_id, reason=reason)

    def acquire_lease(self, *, holder: str, ttl_s: float) -> bool:
        return lease.acquire_lease(session=self.session, holder=holder, ttl_s=ttl_s)

    def release_lease(self, *, holder: str) -> None:
        lease.release_lease(session=self.session, holder=holder)

    def purge_finished(self, *, finished_before: datetime) -> list[str]:
        return retention.purge_finished(session=self.session, finished_before=finished_before)

    def deleted_among(self, *, job_ids: Collection[str]) -> set[str]:
        return retention.deleted_among(session=self.session, job_ids=job_ids)

    def rollback(self) -> None:
        self.session.rollback()


# What a loop keeps its jobs in: a database, or memory (the simulator's).
Storage = Database | MemoryStore


@contextmanager
def opened(storage: Storage) -> Iterator[LiveStore]:
    """The port on one session of a database (committed or rolled back as it ends), or
    the in-memory store itself."""
    if isinstance(storage, MemoryStore):
        yield storage
        return
    with storage.session() as session:
        yield SqlLiveStore(session)


# Checked by `mypy scheduler` (which does not read the tests): both are `LiveStore`s.
_CONFORMS: Callable[[Session], LiveStore] = SqlLiveStore
_IN_MEMORY: Callable[[], LiveStore] = MemoryStore
