"""Issue 29 part 1: the estimator beside the loop (sim backend, virtual time) writes each
pending job's estimated start and queue position, only when the state moved, and says
"unknown" with the reason when a running job's end cannot be told."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.estimator import Estimator, EstimatorConfig
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec.queue import QueueSpec
from scheduler.store import estimates
from scheduler.store.db import Database, open_database
from scheduler.store.queues import create_queue

from .test_loop_sim import submit

Env = tuple[Database, Loop, VirtualClock, Estimator]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    loop = Loop(db, SimBackend(cluster.load_nodes(), clock), clock=clock,
                config=LoopConfig(holder="t", lease_ttl_s=1e6))  # fmt: skip
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    estimator = Estimator(db, EstimatorConfig(subprocess=False))
    loop.observers.append(estimator.observe)
    return db, loop, clock, estimator


def estimate(db: Database, job_id: str) -> estimates.StartEstimate | None:
    with db.session() as s:
        return estimates.of(session=s, job_id=job_id)


def test_jobs_behind_a_bounded_one_start_when_that_ends(env: Env) -> None:
    db, loop, clock, estimator = env
    t0 = clock.now()
    first = submit(db, clock, name="a", workers=2, gpu=4, maxRuntime=3600)  # the whole cluster
    loop.run_once()
    wide = submit(db, clock, name="b", workers=2, gpu=4, maxRuntime=60)
    narrow = submit(db, clock, name="c", workers=1, gpu=4, maxRuntime=120)
    loop.run_once()
    assert estimator.run_once()
    got = [estimate(db, wide), estimate(db, narrow)]
    assert all(e is not None and e.start_at is not None for e in got), got
    ahead, behind = sorted(got, key=lambda e: e.position)  # type: ignore[union-attr]
    assert (ahead.position, behind.position) == (1, 2)
    assert ahead.start_at.timestamp() == pytest.approx(t0 + 3600, abs=5)  # type: ignore[union-attr]
    assert ahead.basis, ahead
    assert behind.start_at >= ahead.start_at  # type: ignore[operator]
    assert estimate(db, first) is None  # running: no estimate
    assert not estimator.run_once()  # nothing moved: no second forecast
    assert estimator.runs == 1


def test_behind_a_job_of_unknown_runtime_the_estimate_is_unknown(env: Env) -> None:
    db, loop, clock, estimator = env
    submit(db, clock, name="a", workers=2, gpu=4)  # no maxRuntime, no history of its queue
    loop.run_once()
    waiting = submit(db, clock, name="b", workers=1, gpu=1)
    loop.run_once()
    estimator.run_once()
    got = estimate(db, waiting)
    assert got is not None and got.start_at is None
    assert got.unknown, got


def test_a_costly_forecast_spaces_the_next_out(env: Env) -> None:
    estimator = env[3]
    assert estimator.pause_s() == estimator.config.interval_s
    estimator.last_seconds = 4.0  # as at 1,000 nodes (docs/benchmarks.md)
    assert estimator.pause_s() == 4.0 / estimator.config.cpu_share  # 5% of a core


def test_the_forecast_runs_in_a_process_of_its_own(env: Env) -> None:
    """As `shoal serve` runs it: the same estimates, made in a spawned process."""
    db, loop, clock, _ = env
    apart = Estimator(db, EstimatorConfig(subprocess=True))
    loop.observers.append(apart.observe)
    submit(db, clock, name="a", workers=2, gpu=4, maxRuntime=3600)
    loop.run_once()
    waiting = submit(db, clock, name="b", workers=1, gpu=1, maxRuntime=60)
    loop.run_once()
    try:
        assert apart.run_once()
    finally:
        apart.close()
    got = estimate(db, waiting)
    assert got is not None and got.start_at is not None, got
    assert got.start_at.timestamp() == pytest.approx(clock.now() + 3600, abs=5)
    assert apart.last_seconds > 0
