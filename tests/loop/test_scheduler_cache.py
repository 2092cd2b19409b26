"""The scheduler cache (`scheduler.loop.cache`) on the sim backend and a SQLite store: a
cycle reconciles only the jobs whose row or workers moved or whose time came; full
passes run at start, on becoming the leader and periodically, and report drift; and a
replay decides the same with the cache as with a full pass every cycle."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
from sqlalchemy import update

from scheduler import model
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.config import CycleReport
from scheduler.loop.service import Loop, LoopConfig
from scheduler.sim import replay
from scheduler.spec import Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import schema
from scheduler.store.db import Database, open_database
from scheduler.store.jobs import cancel_job
from scheduler.store.queues import create_queue

from .test_loop_sim import phase, submit
from .test_sim_fast import _trace

Env = tuple[Database, SimBackend, Loop, VirtualClock]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(cluster.load_nodes(), clock)
    config = LoopConfig(holder="t", lease_ttl_s=1e6, full_pass_every=50)
    loop = Loop(db, backend, clock=clock, config=config)
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec.model_validate({"name": "q"}))
    return db, backend, loop, clock


def cycle(loop: Loop, clock: VirtualClock, dt: float = 1.0) -> CycleReport:
    clock.advance_to(clock.now() + dt)
    report = loop.run_once()
    assert report is not None
    return report


def test_only_what_moved_is_reconciled(env: Env) -> None:
    db, backend, loop, clock = env
    jobs = [submit(db, clock, name=f"j{i}", workers=2, gpu=1) for i in range(3)]
    backend.durations[jobs[0]] = 30
    first = cycle(loop, clock)
    assert first.cache.full and first.cache.looked_at == 3  # the start is a full pass
    assert cycle(loop, clock).cache.looked_at == 3  # Scheduled -> Running, all three
    assert cycle(loop, clock).cache.looked_at == 3  # their rows moved (Running): settled
    steady = [cycle(loop, clock).cache for _ in range(3)]
    assert [(c.full, c.looked_at) for c in steady] == [(False, 0)] * 3
    # jobs[0]'s workers end: it alone is looked at, and succeeds.
    done = cycle(loop, clock, dt=30)
    assert done.cache.looked_at == 1 and done.reconciled.succeeded == [jobs[0]]
    # A cancel moves jobs[1]'s row: it alone is looked at.
    with db.session() as s:
        cancel_job(session=s, job_id=jobs[1], by="t")
    cancelled = cycle(loop, clock)
    assert cancelled.cache.looked_at == 1 and cancelled.reconciled.cancelled == [jobs[1]]
    assert phase(db, jobs[2]) is Phase.RUNNING
    assert not any(c.drift for c in [first.cache, *steady, done.cache, cancelled.cache])


def test_max_runtime_comes_although_nothing_moved(env: Env) -> None:
    db, _, loop, clock = env
    job = submit(db, clock, workers=1, gpu=1, maxRuntime=60)
    for _ in range(3):  # placed, Running, settled (its row moved)
        cycle(loop, clock)
    assert phase(db, job) is Phase.RUNNING
    assert cycle(loop, clock, dt=30).cache.looked_at == 0  # settled until its time
    over = cycle(loop, clock, dt=40)
    assert over.cache.looked_at == 1 and over.reconciled.failed == [job]


def test_a_full_pass_reports_drift_and_repairs_it(env: Env) -> None:
    db, _, loop, clock = env
    job = submit(db, clock, workers=1, gpu=1)
    for _ in range(3):
        cycle(loop, clock)
    # A write that bypasses the store's functions: the row changes, its version does not.
    with db.session() as s:
        s.execute(update(schema.JobRow).where(schema.JobRow.id == job).values(
            cancel_requested=True))  # fmt: skip
        s.commit()
    missed = cycle(loop, clock)
    assert not missed.cache.full and phase(db, job) is Phase.RUNNING  # the cache's view
    loop.cache.full_every = 1  # the next cycle is a full pass
    found = cycle(loop, clock)
    assert found.cache.full
    assert found.cache.drift == (
        f"job {job}: row changed at version 3",
        f"job {job}: settled, but reconcile had something to do",
    )
    assert found.reconciled.cancelled == [job] and phase(db, job) is Phase.CANCELLED


def test_becoming_the_leader_is_a_full_pass(env: Env) -> None:
    db, _, loop, clock = env
    leads = [True]
    loop.config = dataclasses.replace(loop.config, is_leader=lambda: leads[0])
    submit(db, clock, workers=1, gpu=1)
    assert [cycle(loop, clock).cache.full for _ in range(3)] == [True, False, False]
    leads[0] = False
    assert loop.run_once() is None
    leads[0] = True
    again = cycle(loop, clock)
    assert again.cache.full and again.cache.looked_at == 1 and not again.cache.drift


def test_a_replay_decides_the_same_with_the_cache_as_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, nodes = _trace(tmp_path), cluster.load_nodes()
    config = model.Config(min_runtime_s=150.0, starvation_s=400.0)
    cached = replay.simulate(jobs, nodes, config=config)
    monkeypatch.setattr(replay, "LoopConfig", functools.partial(LoopConfig, full_pass_every=1))
    full = replay.simulate(jobs, nodes, config=config)
    assert sum(full.preemptions.values()) > 0 and full.decisions
    assert cached.decisions == full.decisions  # places (with GPUs), preemptions, ends; times
    assert (cached.cycles, cached.end, cached.delays) == (full.cycles, full.end, full.delays)


def test_a_pending_reason_the_loop_wrote_needs_no_read_back(env: Env) -> None:
    db, _, loop, clock = env
    job = submit(db, clock, workers=1, gpu=64)  # never fits: it waits, with a reason
    first = cycle(loop, clock)
    assert [k.job_id for k in first.result.pending] == [job]
    # Its reason, written at version 1: the job as the store now holds it, at 2.
    assert [(lj.id, lj.version) for lj in first.applied.wrote] == [(job, 2)]
    assert cycle(loop, clock).cache.looked_at == 0  # the cached job stands for version 2
    loop.cache.full_every = 1
    full = cycle(loop, clock)
    assert full.cache.full and full.cache.looked_at == 1 and not full.cache.drift


def test_what_the_loop_wrote_is_what_the_store_reads(tmp_path: Path) -> None:
    """A full pass every cycle compares the cache, which takes over the loop's own writes
    instead of reading them back, with the rows: placements, Running, Succeeded,
    preemptions (Requeued), cancels and failed attempts leave no drift."""
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(cluster.load_nodes(), clock)  # 2 nodes x 4 GPUs
    core = model.Config(min_runtime_s=0.0)
    config = LoopConfig(holder="t", lease_ttl_s=1e6, full_pass_every=1, core=core)
    loop = Loop(db, backend, clock=clock, config=config)
    with db.session() as s:
        for name, guaranteed in (("a", 0), ("b", 8)):
            spec = QueueSpec.model_validate({"name": name, "guaranteed": guaranteed})
            create_queue(session=s, spec=spec)
    borrowed = [submit(db, clock, name=f"a{i}", queue="a", gpu=1) for i in range(8)]
    backend.durations[borrowed[0]] = 3  # ends: Succeeded
    reports = [cycle(loop, clock) for _ in range(4)]
    owned = [submit(db, clock, name=f"b{i}", queue="b", gpu=1, backoffLimit=1) for i in range(3)]
    reports += [cycle(loop, clock) for _ in range(4)]
    with db.session() as s:
        cancel_job(session=s, job_id=owned[0], by="t")
    reports += [cycle(loop, clock, dt=20) for _ in range(4)]  # past the victims' grace
    assert all(r.cache.full for r in reports)
    assert [r.cache.drift for r in reports if r.cache.drift] == []
    assert sum(len(r.applied.preempted) for r in reports) >= 2
    assert phase(db, borrowed[0]) is Phase.SUCCEEDED and phase(db, owned[0]) is Phase.CANCELLED
    assert {phase(db, j) for j in owned[1:]} == {Phase.RUNNING}


def test_metrics_count_full_passes_drift_and_jobs_reconciled(env: Env) -> None:
    from prometheus_client import generate_latest

    from api.metrics import Metrics

    db, _, loop, clock = env
    metrics = Metrics(db)
    loop.observers.append(metrics.observe_cycle)
    submit(db, clock, workers=1, gpu=1)
    for _ in range(4):
        cycle(loop, clock)
    text = generate_latest(metrics.registry).decode()
    assert "shoal_cache_full_passes_total 1.0" in text  # the start
    assert "shoal_cache_drift_total 0.0" in text
    assert "shoal_cycle_jobs_reconciled_count 4.0" in text
    assert "shoal_cycle_jobs_reconciled_sum 3.0" in text  # placed, Running, settled; then none
