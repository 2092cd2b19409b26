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

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pg

from scheduler import model
from scheduler.backends.local import LocalBackend, records
from scheduler.cli.wiring import refuse_second_local_replica
from scheduler.core import cycle
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import Database, open_database
from scheduler.store.events import list_events
from scheduler.store.jobs import cancel_job
from scheduler.store.lease import acquire_lease
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes

TTL = 1.0  # seconds: the dead leader's lease runs out quickly


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
        database = open_database(url)
        yield database
        database.close()
        return
    with pg.schema_url() as url:
        database = open_database(url)
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


def _submit(db: Database, seconds: float, *, deaf: Path | None = None) -> str:
    """A 3-worker gang that sleeps `seconds`; with `deaf`, its workers ignore SIGTERM (they
    hold their GPUs for the whole grace period of 30 s) and then touch `deaf/<RANK>`."""
    deafen = (
        "import os, pathlib, signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(deaf)!r}, os.environ['RANK']).touch(); "
        if deaf
        else ""
    )
    spec = JobSpec.model_validate(
        {
            "name": "gang",
            "queue": "q",
            "image": "x",
            "workers": 3,
            "gpu": 1,
            "cpu": "100m",
            "memory": "64Mi",
            "command": ["python", "-c", f"{deafen}import time; time.sleep({seconds})"],
        }
    )
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
        return submit_job(session=s, spec=spec, submitter="t")[0].id


def _phase(db: Database, job_id: str) -> Phase:
    with db.session() as s:
        return Phase(get_job(session=s, job_id=job_id).phase)


def _kinds(db: Database, job_id: str) -> list[str]:
    with db.session() as s:
        return [e.kind for e in list_events(session=s, job_id=job_id)]


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


def test_a_new_leader_adopts_another_replicas_workers_on_this_host(
    db: Database, tmp_path: Path
) -> None:
    """Issue 25 item 0: r2 (another state directory) takes r1's attempt over from r1's
    record: the job finishes on r1's processes, with their exit codes, started once."""
    job = _submit(db, seconds=2)
    first = LocalBackend(tmp_path / "r1")
    second = LocalBackend(tmp_path / "r2")
    try:
        old = _leader(db, first, "r1")
        _cycle_until(old, db, job, Phase.RUNNING)
        new = _leader(db, second, "r2", clock=Later(60))
        _take_over(new)
        deadline = time.time() + 30
        while not second.records.attempts:
            assert time.time() < deadline, "r1's attempt was never adopted"
            new.run_once()
        (rec,) = second.records.attempts.values()
        assert rec.adopted_from == first.instance
        _cycle_until(new, db, job, Phase.SUCCEEDED)
        assert set(_launch_counts(first).values()) == {1} and not _launch_counts(second)
        assert "AttemptFailed" not in _kinds(db, job) and "WorkersElsewhere" not in _kinds(db, job)
    finally:
        for b in (first, second):
            b.kill_all()
            b.close()


def test_workers_out_of_reach_are_never_relaunched_and_keep_their_gpus(
    db: Database, tmp_path: Path
) -> None:
    """r1's state directory is not readable from r2 (another host): r2 leaves the job
    alone, and a cancel does not free its GPUs, since nothing here can stop them."""
    job = _submit(db, seconds=30)
    first = LocalBackend(tmp_path / "r1")
    second = LocalBackend(tmp_path / "r2")
    try:
        old = _leader(db, first, "r1")
        _cycle_until(old, db, job, Phase.RUNNING)
        (tmp_path / "r1").rename(tmp_path / "r1-elsewhere")
        new = _leader(db, second, "r2", clock=Later(60))
        _take_over(new)
        for _ in range(5):
            new.run_once()
            time.sleep(0.05)
        # Left alone: still Running on r1's processes, nothing started by r2.
        assert _phase(db, job) is Phase.RUNNING
        assert not second.records.attempts and not _launch_counts(second)
        assert new.memory.elsewhere == {job: first.instance}
        assert _kinds(db, job).count("WorkersElsewhere") == 1  # said once, not every cycle
        with db.session() as s:
            cancel_job(session=s, job_id=job, by="t")
        report = new.run_once()
        assert _phase(db, job) is Phase.RUNNING  # its 3 GPUs still held
        assert report is not None and report.snapshot is not None
        held = [r for r in report.snapshot.running if r.job.id == job]
        assert held and len(held[0].placements) == 3
        assert held[0].job.preemptible is False  # a stop could not reach them either
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
    directory) must not start the gang a second time: it adopts r1's attempt and starts
    only the two workers r1 never did."""
    deaf = tmp_path / "deaf"
    deaf.mkdir()
    job = _submit(db, seconds=30, deaf=deaf)

    def dies_after_the_first(job_id: str, attempt: int, worker: int) -> None:
        raise Died

    first = LocalBackend(tmp_path / "r1", on_spawn=dies_after_the_first)
    second = LocalBackend(tmp_path / "r2")
    try:
        with pytest.raises(Died):
            _leader(db, first, "r1").run_once()
        assert _phase(db, job) is Phase.SCHEDULED
        (began,) = first.records.attempts.values()
        assert [w.pid is not None for w in began.workers] == [True, False, False]
        new = _leader(db, second, "r2", clock=Later(60))
        _take_over(new)
        for _ in range(5):
            new.run_once()
            time.sleep(0.05)
        # Adopted: r2 finished the launch with the two workers r1 never started.
        _cycle_until(new, db, job, Phase.RUNNING)
        deadline = time.time() + 30  # a shim writes its ledger line once it is up
        while len(ledgers := {**_launch_counts(first), **_launch_counts(second)}) < 3:
            assert time.time() < deadline, ledgers
            time.sleep(0.05)
        assert sorted(k.rsplit(":", 1)[1] for k in ledgers) == ["0", "1", "2"], ledgers
        assert set(ledgers.values()) == {1}, ledgers  # each worker started once
        # Each ignores SIGTERM before the cancel (on a busy machine a worker up in the
        # ledger may not have got that far yet, and a SIGTERM would end it at once).
        while len(list(deaf.iterdir())) < 3:
            assert time.time() < deadline, list(deaf.iterdir())
            time.sleep(0.05)
        # Cancelled: r2 stops r1's worker too, and holds the GPUs while any runs.
        with db.session() as s:
            cancel_job(session=s, job_id=job, by="t")
        _cycle_until(new, db, job, Phase.CANCELLED)
        report = new.run_once()  # the workers ignore SIGTERM: 30 s of grace
        assert report is not None and report.snapshot is not None
        (held,) = [r for r in report.snapshot.running if r.job.id == job]
        assert held.stopping and sorted(p.worker for p in held.placements) == [0, 1, 2]
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
            assert acquire_lease(session=s, holder="r2", ttl_s=60)
        return cycle.schedule(snapshot)

    try:
        old = _leader(db, backend, "r1", schedule=stalled)
        old.run_once()
        # It placed the job in the store, but the launch was refused before it was sent.
        assert _phase(db, job) is Phase.SCHEDULED
        assert not backend.records.attempts
        with db.session() as s:
            events = list_events(session=s, job_id=job)
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
        assert acquire_lease(session=s, holder="serve-a", ttl_s=60)
    with pytest.raises(SystemExit, match="one replica per database"):
        refuse_second_local_replica(db, "serve-b")
    refuse_second_local_replica(db, "serve-a")  # the same replica, restarted: welcome
