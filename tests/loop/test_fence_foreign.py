"""The lease fence covers foreign pods too (issue 26 step 1): a leader that stalls past
its renew deadline binds no foreign pod and writes no pod status, as it launches and
stops nothing; one that holds its lease binds and notes as before."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from scheduler import model
from scheduler.backends import base
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.core import cycle
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import Database, open_database
from scheduler.store.lease import acquire_lease
from scheduler.store.queues import create_queue

TTL = 1.0


class Foreign(SimBackend):
    """The sim cluster with two foreign pods asking to be placed: one fits, one never
    does (it gets a note)."""

    def __init__(self) -> None:
        super().__init__(cluster.load_nodes(), VirtualClock())
        self.bound: list[str] = []
        self.noted: list[str] = []

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(foreign=self, pending_notes=self)

    def foreign_requests(self) -> Sequence[model.JobRequest]:
        asks = [
            model.JobRequest("pod:ns/a", "q", gpu=1.0),
            model.JobRequest("pod:ns/b", "q", gpu=64.0),
        ]
        return [r for r in asks if r.id not in self.bound]

    def foreign_running(self) -> Sequence[model.RunningJob]:
        return ()

    def bind_foreign(self, job_id: str, placement: model.WorkerPlacement) -> None:
        self.bound.append(job_id)

    def note_pending(self, job_id: str, message: str) -> None:
        self.noted.append(job_id)


def _db(tmp_path: Path) -> Database:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
    return db


def test_a_stalled_leader_binds_and_notes_nothing(tmp_path: Path) -> None:
    db, backend = _db(tmp_path), Foreign()

    def stalled(snapshot: model.Snapshot) -> model.CycleResult:
        time.sleep(TTL * 1.2)  # past the renew deadline; another replica takes the lease
        with db.session() as s:
            assert acquire_lease(session=s, holder="r2", ttl_s=60)
        return cycle.schedule(snapshot)

    loop = Loop(db, backend, schedule=stalled, config=LoopConfig(holder="r1", lease_ttl_s=TTL))
    loop.run_once()
    assert backend.bound == [] and backend.noted == []
    db.close()


def test_a_leader_binds_and_notes(tmp_path: Path) -> None:
    db, backend = _db(tmp_path), Foreign()
    Loop(db, backend, config=LoopConfig(holder="r1", lease_ttl_s=60)).run_once()
    assert backend.bound == ["pod:ns/a"] and backend.noted == ["pod:ns/b"]
    db.close()
