"""Issue 15, fault 2: failover without double runs. Two schedulers on one database; the
leader dies (stops renewing its lease, its workers keep running) and the other takes over.

- A backend whose workers every replica sees (Kubernetes: pods): the new leader adopts
  them; nothing is launched again.
- The local backend (processes of one host and state directory): the new leader cannot
  see them, so it leaves them alone and says so, rather than relaunching them; and
  `shoal serve --backend local` refuses to start beside a leading replica.
- A leader that stalls past its renew deadline is fenced: it launches nothing more.

On SQLite and, with SHOAL_TEST_PG_URL, on PostgreSQL (a schema per test).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pg

from scheduler import model, store
from scheduler.backends import base
from scheduler.backends.local import LocalBackend, records
from scheduler.cli.serve import refuse_second_local_replica
from scheduler.core import cycle
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase, QueueSpec
from scheduler.store.db import Database

TTL = 1.0  # seconds: the dead leader's lease runs out quickly


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
        database = store.open_database(url)
        yield database
        database.close()
        return
    with pg.schema_url() as url:
        database = store.open_database(url)
        try:
            yield database
        finally:
            database.close()


class Later:
    """The wall clock, `offset` seconds ahead: the takeover happens a minute after the
    launch, so a worker not seen by then would count as lost (`MISSING_GRACE_S`)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset


def _submit(db: Database, seconds: float) -> str:
    spec = JobSpec.model_validate(
        {
            "name": "gang",
            "queue": "q",
            "image": "x",
            "workers": 3,
            "gpu": 1,
            "cpu": "100m",
            "memory": "64Mi",
            "command": ["python", "-c", f"import time; time.sleep({seconds})"],
        }
    )
    with db.session() as s:
        store.create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
        return store.submit_job(session=s, spec=spec, submitter="t")[0].id


def _phase(db: Database, job_id: str) -> Phase:
    with db.session() as s:
        return Phase(store.get_job(session=s, job_id=job_id).phase)


def _kinds(db: Database, job_id: str) -> list[str]:
    with db.session() as s:
        return [e.kind for e in store.list_events(session=s, job_id=job_id)]


def _cycle_until(loop: Loop, db: Database, job_id: str, phase: Phase, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while _phase(db, job_id) is not phase and time.time() < deadline:
        loop.run_once()
        time.sleep(0.05)
    assert _phase(db, job_id) is phase


def _leader(db: Database, backend: LocalBackend, name: str, **kw: object) -> Loop:
    return Loop(db, backend, config=LoopConfig(holder=name, lease_ttl_s=TTL), **kw)  # type: ignore[arg-type]


def _take_over(loop: Loop) -> None:
    """Cycle until `loop` holds the lease (the dead leader's has run out)."""
    deadline = time.time() + 30
    while loop.run_once() is None:
        assert time.time() < deadline, "the lease never passed to the new leader"
        time.sleep(0.1)


def _launch_counts(backend: LocalBackend) -> dict[str, int]:
    return records.Records(backend.state_dir / "local").launches()


def test_a_new_leader_adopts_the_workers_it_can_see(db: Database, tmp_path: Path) -> None:
    job = _submit(db, seconds=4)
    backend = LocalBackend(tmp_path / "state")  # one cluster both replicas see
    try:
        old = _leader(db, backend, "r1")
        _cycle_until(old, db, job, Phase.RUNNING)
        # r1 dies: it cycles no more, its lease runs out, its workers keep running.
        new = _leader(db, backend, "r2", clock=Later(60))
        _take_over(new)
        assert _phase(db, job) is Phase.RUNNING
        _cycle_until(new, db, job, Phase.SUCCEEDED)
        counts = _launch_counts(backend)
        assert len(counts) == 3 and set(counts.values()) == {1}, counts
        assert "AttemptFailed" not in _kinds(db, job)
        assert "AttemptInterrupted" not in _kinds(db, job)
    finally:
        backend.kill_all()
        backend.close()


def test_a_new_leader_never_relaunches_workers_it_cannot_see(db: Database, tmp_path: Path) -> None:
    job = _submit(db, seconds=30)
    first = LocalBackend(tmp_path / "r1")
    second = LocalBackend(tmp_path / "r2")  # another state directory: r1's processes unseen
    try:
        old = _leader(db, first, "r1")
        _cycle_until(old, db, job, Phase.RUNNING)
        new = _leader(db, second, "r2", clock=Later(60))
        _take_over(new)
        for _ in range(5):
            new.run_once()
            time.sleep(0.05)
        # Left alone: still Running on r1's processes, nothing started by r2.
        assert _phase(db, job) is Phase.RUNNING
        assert not second.records.attempts and not _launch_counts(second)
        assert set(_launch_counts(first).values()) == {1}
        assert new.elsewhere == {job: first.instance}
        assert _kinds(db, job).count("WorkersElsewhere") == 1  # said once, not every cycle
    finally:
        first.kill_all()
        first.close()
        second.kill_all()
        second.close()


class Died(BaseException):
    """The process ends here: nothing after it runs (not an Exception the loop catches)."""


def test_a_gang_a_dead_leader_began_to_launch_is_not_started_again(
    db: Database, tmp_path: Path
) -> None:
    """Issue 25 item 0: r1 dies with one of three workers started; r2 (another state
    directory, so r1's processes unseen) must not start the gang a second time."""
    job = _submit(db, seconds=30)
    first = LocalBackend(tmp_path / "r1")
    second = LocalBackend(tmp_path / "r2")
    whole = first.launch

    def dies_partway(request: base.LaunchRequest) -> None:
        whole(dataclasses.replace(request, placements=request.placements[:1]))
        raise Died

    first.launch = dies_partway  # type: ignore[method-assign]
    try:
        with pytest.raises(Died):
            _leader(db, first, "r1").run_once()
        assert _phase(db, job) is Phase.SCHEDULED
        (began,) = first.records.attempts.values()
        assert len(began.workers) == 1  # one of three started
        new = _leader(db, second, "r2", clock=Later(60))
        _take_over(new)
        for _ in range(5):
            new.run_once()
            time.sleep(0.05)
        assert not second.records.attempts and not _launch_counts(second)
        assert new.elsewhere == {job: first.instance}
    finally:
        for b in (first, second):
            b.kill_all()
            b.close()


def test_a_leader_stalled_past_its_lease_launches_nothing(db: Database, tmp_path: Path) -> None:
    job = _submit(db, seconds=0.5)
    backend = LocalBackend(tmp_path / "state")

    def stalled(snapshot: model.Snapshot) -> model.CycleResult:
        # A long pause (GC, a swapped-out process) in the middle of r1's cycle, during
        # which its lease runs out and r2 takes it.
        time.sleep(TTL * 1.2)
        with db.session() as s:
            assert store.acquire_lease(session=s, holder="r2", ttl_s=60)
        return cycle.schedule(snapshot)

    try:
        old = _leader(db, backend, "r1", schedule=stalled)
        old.run_once()
        # It placed the job in the store, but the launch was refused before it was sent.
        assert _phase(db, job) is Phase.SCHEDULED
        assert not backend.records.attempts
        with db.session() as s:
            events = store.list_events(session=s, job_id=job)
        retry = [e for e in events if e.kind == "LaunchRetry"]
        assert retry and "lease has lapsed" in retry[-1].message
        assert old.run_once() is None  # r1 no longer leads
        new = Loop(db, backend, clock=Later(60), config=LoopConfig(holder="r2", lease_ttl_s=60))
        _cycle_until(new, db, job, Phase.SUCCEEDED)  # r2 finished the launch: once
        assert set(_launch_counts(backend).values()) == {1}
    finally:
        backend.kill_all()
        backend.close()


def test_a_leader_renews_its_lease_through_a_long_cycle(db: Database, tmp_path: Path) -> None:
    """A cycle longer than the renew deadline, with no one else about, still launches:
    it renews its lease before the launch instead of giving up."""
    job = _submit(db, seconds=0.5)
    backend = LocalBackend(tmp_path / "state")

    def slow(snapshot: model.Snapshot) -> model.CycleResult:
        time.sleep(TTL * 0.8)  # past 2/3 of the lease, not past all of it
        return cycle.schedule(snapshot)

    try:
        loop = _leader(db, backend, "r1", schedule=slow)
        report = loop.run_once()
        assert report is not None and report.applied.placed == [job]
        assert len(backend.records.attempts) == 1
    finally:
        backend.kill_all()
        backend.close()


def test_serve_refuses_a_second_local_replica_beside_a_leader(db: Database) -> None:
    with db.session() as s:
        assert store.acquire_lease(session=s, holder="serve-a", ttl_s=60)
    with pytest.raises(SystemExit, match="one replica per database"):
        refuse_second_local_replica(db, "serve-b")
    refuse_second_local_replica(db, "serve-a")  # the same replica, restarted: welcome
