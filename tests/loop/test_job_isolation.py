"""Issue 15, fault 1: one job's data must never fail the cycle for everyone. An exception
while handling one job becomes that job's reason (`JobError`) and event, with a backoff,
and the other jobs are scheduled as if it were not there.

The loops run on a `VirtualClock` that moves only when a test moves it: a backoff runs out
because the test says so, not because a loaded machine took longer than 5 s."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from support.wait import eventually

from scheduler import model
from scheduler.backends.local import LocalBackend
from scheduler.clock import VirtualClock
from scheduler.core import cycle
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import schema
from scheduler.store.db import Database, open_database
from scheduler.store.events import list_events
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes

BASE = {"image": "x", "gpu": 1, "cpu": "100m", "memory": "64Mi", "command": ["python", "-c", ""]}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(f"sqlite:///{tmp_path / 's.db'}")
    with database.session() as s:
        for name in ("a", "b"):
            create_queue(session=s, spec=QueueSpec(name=name, guaranteed=4))
    yield database
    database.close()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path / "state")
    yield b
    b.kill_all()
    b.close()


def _submit(db: Database, name: str, queue: str) -> str:
    spec = JobSpec.model_validate({**BASE, "name": name, "queue": queue})
    with db.session() as s:
        return submit_job(session=s, spec=spec, submitter="t")[0].id


def _job(db: Database, job_id: str) -> schema.JobRow:
    with db.session() as s:
        return get_job(session=s, job_id=job_id)


def _loop(
    db: Database,
    backend: LocalBackend,
    schedule: Callable[[model.Snapshot], model.CycleResult] | None = None,
) -> tuple[Loop, VirtualClock]:
    clock = VirtualClock(time.time())  # from now, so submit times are not in its future
    config = LoopConfig(holder="t", lease_ttl_s=1e6)
    return Loop(db, backend, clock=clock, config=config, schedule=schedule), clock


def _run_until(loop: Loop, db: Database, job_id: str, phase: Phase) -> None:
    def reached() -> bool:
        loop.run_once()  # raises if one job's trouble fails the cycle
        return Phase(_job(db, job_id).phase) is phase

    eventually(reached, what=f"{job_id} {phase.value}")


def _job_errors(db: Database, job_id: str) -> list[str]:
    with db.session() as s:
        events = list_events(session=s, job_id=job_id)
    return [e.message for e in events if e.kind == "JobError"]


@pytest.mark.parametrize(
    "field,value",
    [("maxRuntime", 10**400), ("memory", "9" * 400 + "Mi"), ("gpuMemory", "9" * 400 + "Gi")],
)
def test_a_stored_job_that_cannot_be_read_is_its_own_reason(
    db: Database, backend: LocalBackend, field: str, value: object
) -> None:
    bad = _submit(db, "bad", "a")
    # What an older version let in (the API bounds these now): written to the row directly.
    with db.session() as s:
        raw = dict(_job(db, bad).spec)
        raw[field] = value
        if field == "gpuMemory":
            raw.pop("gpu", None)
        s.execute(update(schema.JobRow).where(schema.JobRow.id == bad).values(spec=raw))
        s.commit()
    good = _submit(db, "good", "b")
    loop, clock = _loop(db, backend)
    _run_until(loop, db, good, Phase.SUCCEEDED)
    row = _job(db, bad)
    assert row.phase == Phase.PENDING.value
    assert row.pending_code == model.ReasonCode.JOB_ERROR.value
    message = row.pending_message or ""
    assert message.startswith("reading the stored job failed for this job")
    assert len(message) < 600  # the 400 digits are not repeated in full
    # One error event, not one per cycle: the job sits out its backoff...
    errors = _job_errors(db, bad)
    assert len(errors) == 1, errors
    # ...and is looked at again (and still fails, once more) when the backoff is over.
    clock.advance_to(clock.now() + 301)  # past the memory's faulty backoff's longest delay
    loop.run_once()
    assert len(_job_errors(db, bad)) == 2, _job_errors(db, bad)


def test_a_job_that_makes_the_core_raise_is_found_and_held_back(
    db: Database, backend: LocalBackend
) -> None:
    jobs = [_submit(db, f"j{i}", "ab"[i % 2]) for i in range(5)]
    poison = jobs[3]
    calls: list[int] = []

    # The real core, failing whenever one particular job is among the pending ones: the
    # shape of a value the core cannot handle, which no validation has caught yet.
    def schedule(snapshot: model.Snapshot) -> model.CycleResult:
        calls.append(len(snapshot.pending))
        if any(j.id == poison for j in snapshot.pending):
            raise ArithmeticError("cannot place this job")
        return cycle.schedule(snapshot)

    loop, _ = _loop(db, backend, schedule=schedule)
    report = loop.run_once()
    assert report is not None
    assert set(report.applied.placed) == set(jobs) - {poison}
    row = _job(db, poison)
    assert row.phase == Phase.PENDING.value
    assert row.pending_code == model.ReasonCode.JOB_ERROR.value
    assert "scheduling failed for this job: ArithmeticError: cannot place this job" in (
        row.pending_message or ""
    )
    # Held back: the next cycles leave it out instead of bisecting again.
    calls.clear()
    loop.run_once()
    assert calls and all(n == 0 for n in calls), calls
    for j in set(jobs) - {poison}:
        _run_until(loop, db, j, Phase.SUCCEEDED)


def test_a_core_failure_no_pending_job_explains_still_fails_the_cycle(
    db: Database, backend: LocalBackend
) -> None:
    _submit(db, "j", "a")

    def schedule(snapshot: model.Snapshot) -> model.CycleResult:
        raise ArithmeticError("broken for everyone")

    loop, _ = _loop(db, backend, schedule=schedule)
    with pytest.raises(ArithmeticError, match="broken for everyone"):
        loop.run_once()
