"""Faults around an elastic job's resize, on the real loop with the sim backend (virtual
clock) and SQLite: a crash between the store's `record_resize` and the backend's grow or
shrink (`resize:recorded`), the loop restarted on the same database and cluster; and a
resize whose job moved on before it was carried out."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from scheduler import model
from scheduler.backends import base
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.backends.sim.backend import SimAttempt
from scheduler.clock import VirtualClock, as_datetime
from scheduler.core import cycle, invariants
from scheduler.loop import faults
from scheduler.loop.config import CycleReport
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import schema
from scheduler.store.db import Database, open_database
from scheduler.store.events import list_events
from scheduler.store.jobs import cancel_job
from scheduler.store.live import live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

CRASH_POINT = "resize:recorded"


class Crash(BaseException):
    """The scheduler process dying at a crash point (a BaseException: nothing in the loop
    catches it, as nothing survives a SIGKILL)."""


class Counting(SimBackend):
    """The sim backend, counting the loop's calls to grow and shrink."""

    def __init__(self, nodes: Sequence[model.Node], clock: VirtualClock) -> None:
        super().__init__(nodes, clock)
        self.grows: list[tuple[str, int, tuple[int, ...]]] = []
        self.shrinks: list[tuple[str, int, tuple[int, ...]]] = []

    def grow(self, request: base.LaunchRequest) -> None:
        self.grows.append(
            (request.job_id, request.attempt, tuple(p.worker for p in request.placements))
        )
        super().grow(request)

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        self.shrinks.append((job_id, attempt, tuple(workers)))
        super().shrink(job_id, attempt, workers, grace_period_s)


class Armed:
    """`faults.point` for these tests: raises `Crash` at the next `resize:recorded`."""

    def __init__(self) -> None:
        self.armed = False
        self.reached: list[str] = []

    def __call__(self, name: str) -> None:
        self.reached.append(name)
        if self.armed and name == CRASH_POINT:
            self.armed = False
            raise Crash(name)


@pytest.fixture
def crash(monkeypatch: pytest.MonkeyPatch) -> Armed:
    armed = Armed()
    monkeypatch.setattr(faults, "point", armed)
    return armed


@dataclasses.dataclass
class World:
    db: Database
    clock: VirtualClock
    sim: Counting
    loop: Loop
    reports: list[CycleReport] = dataclasses.field(default_factory=list)

    def restart(self) -> None:
        """A new loop (a restarted process) on the same database and cluster."""
        self.loop = _loop(self.db, self.sim, self.clock)

    def cycle(self) -> CycleReport:
        report = self.loop.run_once()
        assert report is not None  # the only replica: it leads
        self.reports.append(report)
        _no_overcommit(report, self.sim, self.db)
        return report

    def until(self, done: Callable[[], bool], cycles: int = 20, step_s: float = 0.0) -> None:
        for _ in range(cycles):
            if done():
                return
            if step_s:
                self.clock.advance_to(self.clock.now() + step_s)
            self.cycle()
        assert done(), f"not reached in {cycles} cycles"

    def job(self, job_id: str) -> schema.JobRow:
        with self.db.session() as s:
            return get_job(session=s, job_id=job_id)

    def kinds(self, job_id: str) -> list[str]:
        with self.db.session() as s:
            return [e.kind for e in list_events(session=s, job_id=job_id)]

    def submit(self, spec: JobSpec, duration_s: float, size: int | None = None) -> str:
        with self.db.session() as s:
            row, _ = submit_job(
                session=s, spec=spec, submitter="t", now=as_datetime(self.clock.now())
            )
        self.sim.durations[row.id] = duration_s
        if size is not None:
            self.sim.sizes[row.id] = size
        return row.id

    def attempt(self, job_id: str) -> SimAttempt:
        (a,) = [a for (jid, _), a in self.sim.attempts.items() if jid == job_id]
        return a


def _loop(db: Database, sim: SimBackend, clock: VirtualClock) -> Loop:
    config = LoopConfig(holder="t", lease_ttl_s=1e6, core=model.Config(min_runtime_s=0.0))
    return Loop(db, sim, clock=clock, config=config)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    sim = Counting(cluster.load_nodes(), clock)  # 2 nodes x 4 GPUs
    assert sum(n.gpu_count for n in sim.nodes()) == 8
    yield World(db, clock, sim, _loop(db, sim, clock))
    db.close()


def _no_overcommit(report: CycleReport, sim: SimBackend, db: Database) -> None:
    """Nothing over-allocated: not in the cycle's snapshot (the store's placements and the
    draining workers), not among the cluster's running workers, not in the store."""
    assert report.snapshot is not None
    bad = [v for v in invariants.check(report.snapshot) if v.kind == "gpu-overcommit"]
    assert not bad, bad
    assert not [v for v in report.result.violations if v.kind == "gpu-overcommit"]
    held: dict[tuple[str, int], float] = defaultdict(float)
    for w in sim.workers():
        if w.state is base.WorkerState.RUNNING:
            for g in w.gpus:
                held[(w.node, g)] += w.fraction
    assert all(v <= 1 + 1e-9 for v in held.values()), dict(held)
    placed: dict[tuple[str, int], float] = defaultdict(float)
    with db.session() as s:
        for lj in live_jobs(session=s):
            for p in lj.placements:
                for g in p.gpus:
                    placed[(p.node, g)] += p.fraction
    assert all(v <= 1 + 1e-9 for v in placed.values()), dict(placed)


def _spec(name: str, queue: str, workers: object, grace_s: int = 30) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": queue,
            "image": "x",
            "command": ["c"],
            "workers": workers,
            "gpu": 1,
            "terminationGracePeriodSeconds": grace_s,
        }
    )


def _queue(db: Database, name: str, guaranteed: int) -> None:
    with db.session() as s:
        spec = QueueSpec.model_validate({"name": name, "guaranteed": guaranteed})
        create_queue(session=s, spec=spec)


def _workers(sim: SimBackend, job_id: str) -> dict[int, base.WorkerState]:
    return {w.worker: w.state for w in sim.workers() if w.job_id == job_id}


def test_a_crash_after_a_grow_is_recorded_starts_the_new_workers_once(
    world: World, crash: Armed
) -> None:
    _queue(world.db, "q", 8)
    other = world.submit(_spec("b", "q", 6), 100.0)
    start = world.clock.now()
    world.cycle()  # the 6-GPU job first
    el = world.submit(_spec("el", "q", {"min": 1, "max": 4}), 1000.0, size=4)
    world.until(lambda: world.job(el).phase == Phase.RUNNING.value)
    a = world.attempt(el)
    assert len(a.placements) == 2 and not world.sim.grows  # the 2 GPUs left
    world.clock.advance_to(start + model.Config().resize_interval_s)
    crash.armed = True
    with pytest.raises(Crash):
        world.until(lambda: False, cycles=10)  # the other job ends; then the grow
    assert world.job(other).phase == Phase.SUCCEEDED.value
    # The store has the grow; the cluster does not.
    row = world.job(el)
    assert len(row.placements) == 4 and row.resized_at is not None
    assert world.kinds(el).count("Resized") == 1
    assert len(a.placements) == 2 and not a.resized and not world.sim.grows

    world.restart()
    world.cycle()  # settles: starts workers 2 and 3
    assert world.sim.grows == [(el, 1, (0, 1, 2, 3))]
    assert a.resized == [(world.clock.now(), 2, 4)] and len(a.placements) == 4
    assert _workers(world.sim, el) == {w: base.WorkerState.RUNNING for w in range(4)}
    for _ in range(3):  # the next cycles leave it be: nothing to start
        world.cycle()
    assert len(world.sim.grows) == 1 and len(a.resized) == 1
    world.clock.advance_to(a.ends())
    world.until(lambda: world.job(el).phase == Phase.SUCCEEDED.value)
    row = world.job(el)
    assert row.attempt == 1 and row.restarts == 0
    assert world.sim.launch_count == {(other, 1): 1, (el, 1): 1}
    assert world.kinds(el).count("Resized") == 1
    assert "AttemptFailed" not in world.kinds(el) and "AttemptInterrupted" not in world.kinds(el)
    assert CRASH_POINT in crash.reached


def test_a_crash_after_a_shrink_is_recorded_stops_the_removed_workers_and_holds_their_gpus(
    world: World, crash: Armed
) -> None:
    _queue(world.db, "a", 2)
    _queue(world.db, "p", 6)
    el = world.submit(_spec("el", "a", {"min": 2, "max": 8}, grace_s=30), 5000.0)
    world.until(lambda: world.job(el).phase == Phase.RUNNING.value)
    a = world.attempt(el)
    assert len(a.placements) == 8  # the whole cluster: nobody else wants it
    world.clock.advance_to(world.clock.now() + 120.0)
    prod = world.submit(_spec("prod", "p", 4), 200.0)
    crash.armed = True
    with pytest.raises(Crash):
        world.until(lambda: False, cycles=10)  # prod's reclaim: el shrinks to 4
    row = world.job(el)
    assert [int(p["worker"]) for p in row.placements] == [0, 1, 2, 3]
    assert row.resized_at is not None and world.kinds(el).count("Resized") == 1
    assert not world.sim.shrinks and not a.resized and len(a.placements) == 8
    assert world.job(prod).phase == Phase.PENDING.value

    world.restart()
    world.cycle()  # settles: stops workers 4..7 (they end after their grace)
    assert world.sim.shrinks == [(el, 1, (4, 5, 6, 7))]
    assert sorted(a.removed) == [4, 5, 6, 7] and len(a.placements) == 4
    assert _workers(world.sim, el) == {w: base.WorkerState.RUNNING for w in range(8)}
    gone_at = world.clock.now() + 30.0
    for _ in range(3):  # at the same time: their GPUs still held, prod still waits
        world.cycle()
        assert world.job(prod).phase == Phase.PENDING.value
    assert len(world.sim.shrinks) == 1

    def prod_placed() -> bool:
        if not world.job(prod).placements:
            return False
        assert world.clock.now() >= gone_at  # not placed before the workers are gone
        return True

    world.until(prod_placed, cycles=40, step_s=5.0)
    states = _workers(world.sim, el)
    assert [states[w] for w in range(4)] == [base.WorkerState.RUNNING] * 4
    assert [states[w] for w in range(4, 8)] == [base.WorkerState.FAILED] * 4
    world.until(lambda: world.job(prod).phase == Phase.RUNNING.value)
    held = {(p["node"], g) for p in world.job(prod).placements for g in p["gpus"]}
    freed = {(r.placement.node, g) for r in a.removed.values() for g in r.placement.gpus}
    assert held == freed  # the GPUs the shrink gave up, and nothing else was free
    assert len(world.sim.shrinks) == 1 and len(a.resized) == 1
    row = world.job(el)
    assert row.phase == Phase.RUNNING.value and row.attempt == 1 and row.restarts == 0
    assert world.sim.launch_count[(el, 1)] == 1
    kinds = world.kinds(el)
    assert "Preempted" not in kinds and "AttemptFailed" not in kinds
    assert "AttemptInterrupted" not in kinds and kinds.count("Resized") == 1


@dataclasses.dataclass(frozen=True)
class Seen:
    version: int
    placements: list[object]
    resized_at: object
    events: list[str]


def _seen(world: World, job_id: str) -> Seen:
    row = world.job(job_id)
    return Seen(row.version, list(row.placements), row.resized_at, world.kinds(job_id))


@pytest.mark.parametrize("kind", ["grow", "shrink"])
def test_a_resize_of_a_job_cancelled_meanwhile_changes_nothing(world: World, kind: str) -> None:
    """The core decides a resize; the job is cancelled between the loop's read and its
    write (here: while the core runs). The resize is skipped: nothing written to the
    store, no grow or shrink asked of the cluster; the cancel then goes on as usual."""
    decided: list[model.Resize] = []
    cancelled: list[Seen] = []
    el = first = prod = ""

    def schedule(snapshot: model.Snapshot) -> model.CycleResult:
        result = cycle.schedule(snapshot)
        mine = [r for r in result.resizes if r.job_id == el]
        if mine and not cancelled:
            decided.extend(mine)
            with world.db.session() as s:
                cancel_job(session=s, job_id=el, by="al")
            cancelled.append(_seen(world, el))
        return result

    config = world.loop.config
    world.loop = Loop(world.db, world.sim, clock=world.clock, config=config, schedule=schedule)
    if kind == "grow":
        _queue(world.db, "q", 8)
        first = world.submit(_spec("b", "q", 6), 100.0)
        world.cycle()
        el = world.submit(_spec("el", "q", {"min": 1, "max": 4}), 1000.0, size=4)
    else:
        _queue(world.db, "a", 2)
        _queue(world.db, "p", 6)
        el = world.submit(_spec("el", "a", {"min": 2, "max": 8}, grace_s=30), 5000.0)
    world.until(lambda: world.job(el).phase == Phase.RUNNING.value)
    a = world.attempt(el)
    size = len(a.placements)
    assert size == (2 if kind == "grow" else 8) and not decided
    if kind == "grow":
        world.clock.advance_to(world.clock.now() + model.Config().resize_interval_s)
    else:
        world.clock.advance_to(world.clock.now() + 120.0)
        prod = world.submit(_spec("prod", "p", 4), 200.0)
    world.until(lambda: bool(cancelled), cycles=10)
    (r,) = decided
    assert len(r.placements) == 4  # grown from 2 / shrunk from 8
    if kind == "grow":  # into the GPUs the first job left
        assert world.job(first).phase == Phase.SUCCEEDED.value
    # The cycle that decided it wrote nothing more to the job, and the cluster saw nothing.
    assert _seen(world, el) == cancelled[0]
    row = world.job(el)
    assert row.cancel_requested and row.resized_at is None and len(row.placements) == size
    assert "Resized" not in world.kinds(el)
    assert not world.sim.grows and not world.sim.shrinks and not a.resized
    assert len(a.placements) == size
    # The cancel goes on: the attempt is stopped whole, never resized.
    world.until(lambda: world.job(el).phase == Phase.CANCELLED.value, cycles=40, step_s=5.0)
    assert not world.sim.grows and not world.sim.shrinks and not a.resized
    assert "Resized" not in world.kinds(el)
    if kind == "shrink":
        world.until(lambda: world.job(prod).phase == Phase.RUNNING.value, cycles=40, step_s=5.0)


def test_a_crash_after_a_grow_back_into_removed_indices_is_recorded_restarts_them(
    world: World, crash: Armed
) -> None:
    """Issue 35: a shrink removed workers 4..7 (they ended, exit 143, `Resized`); a grow
    back into those indices is recorded, then the process dies before the backend's
    grow. The restarted loop must tell the removed workers' exits from a failure: it
    starts the new ones, and the job goes on."""
    _queue(world.db, "a", 2)
    _queue(world.db, "p", 6)
    el = world.submit(_spec("el", "a", {"min": 2, "max": 8}, grace_s=30), 5000.0)
    world.until(lambda: world.job(el).phase == Phase.RUNNING.value)
    a = world.attempt(el)
    assert len(a.placements) == 8
    world.clock.advance_to(world.clock.now() + 120.0)
    prod = world.submit(_spec("prod", "p", 4), 200.0)
    world.until(lambda: world.job(prod).phase == Phase.RUNNING.value, cycles=40, step_s=5.0)
    assert set(world.sim.shrinks) == {(el, 1, (4, 5, 6, 7))}  # settle may repeat it
    ended = _workers(world.sim, el)
    assert [ended[w] for w in range(4, 8)] == [base.WorkerState.FAILED] * 4
    crash.armed = True
    with pytest.raises(Crash):  # prod ends; once the interval is over, el grows back
        world.until(lambda: False, cycles=200, step_s=10.0)
    row = world.job(el)
    assert len(row.placements) == 8 and world.kinds(el).count("Resized") == 2
    assert world.sim.grows == []  # the store has the grow; the cluster does not

    world.restart()
    world.until(lambda: len(world.sim.grows) == 1, cycles=5)
    world.until(
        lambda: _workers(world.sim, el) == {w: base.WorkerState.RUNNING for w in range(8)},
        cycles=5,
    )
    row = world.job(el)
    assert row.phase == Phase.RUNNING.value and row.attempt == 1 and row.restarts == 0
    kinds = world.kinds(el)
    assert "AttemptFailed" not in kinds and "Failed" not in kinds
