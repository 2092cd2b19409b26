"""Issue 35: a new job had no start-time estimate for ~30 s (the estimator slept its whole
interval between rounds, whatever arrived), and an estimate that had passed while the job
still waited stayed as it was until something else moved. Now a job the last forecast did
not cover is forecast at the next cycle (or, while forecasts are spaced out for their cost,
gets an "unknown" that says so, followed by the real estimate), and a passed estimate is
recomputed. The loop runs on the sim backend in virtual time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.estimator import Estimator, EstimatorConfig
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import estimates
from scheduler.store.db import Database, open_database
from scheduler.store.queues import create_queue

from .test_loop_sim import phase, submit

Env = tuple[Database, Loop, SimBackend, VirtualClock]
HOUR = 3600.0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(cluster.load_nodes(), clock)
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    yield db, loop, backend, clock
    db.close()


@pytest.fixture
def spaced(env: Env) -> Iterator[Estimator]:
    """The estimator beside `env`'s loop, its forecasts spaced out on the loop's virtual
    time. An interval of an hour: only a new job (or a passed estimate) explains a
    forecast."""
    db, loop, _, clock = env
    config = EstimatorConfig(interval_s=HOUR, subprocess=False)
    estimator = Estimator(db, config, clock=clock.now)
    loop.observers.append(estimator.observe)
    yield estimator
    estimator.close()


def estimate(db: Database, job_id: str) -> estimates.StartEstimate | None:
    with db.session() as s:
        return estimates.of(session=s, job_id=job_id)


def cycle(loop: Loop, clock: VirtualClock, seconds: float = 2.0) -> None:
    """One loop cycle, `seconds` (the loop's interval) after the last."""
    clock.advance_to(clock.now() + seconds)
    loop.run_once()


def test_a_new_job_is_estimated_without_waiting_for_the_interval(env: Env) -> None:
    """As `shoal serve` runs it: on a thread of its own, woken by the loop, spaced out on
    real time."""
    db, loop, _, clock = env
    estimator = Estimator(db, EstimatorConfig(interval_s=HOUR, subprocess=False))
    loop.observers.append(estimator.observe)
    stop = threading.Event()
    thread = threading.Thread(target=estimator.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        first = submit(db, clock, name="a", workers=2, gpu=4, maxRuntime=HOUR)  # all GPUs
        cycle(loop, clock)
        eventually(lambda: estimator.runs >= 1, what="the first forecast")
        waiting = submit(db, clock, name="b", workers=1, gpu=1, maxRuntime=60)
        cycle(loop, clock)
        got = eventually(lambda: estimate(db, waiting), what="an estimate of the new job")
        if got.start_at is None:  # forecasts spaced out for their cost: it says so
            assert "not run since it was submitted" in got.unknown, got
            # The spacing passes (real time, no cycle needed): the real estimate follows.
            got = eventually(
                lambda: (e := estimate(db, waiting)) is not None and e.start_at and e,
                what="the real estimate",
            )
        assert got.start_at.timestamp() == pytest.approx(clock.now() + HOUR, abs=10), got
        assert phase(db, first) in (Phase.SCHEDULED, Phase.RUNNING)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_while_forecasts_are_spaced_out_a_new_job_says_why_it_has_none(
    env: Env, spaced: Estimator
) -> None:
    db, loop, _, clock = env
    estimator = spaced
    submit(db, clock, name="a", workers=2, gpu=4, maxRuntime=HOUR)
    cycle(loop, clock)
    assert estimator.tick() and estimator.runs == 1
    estimator.last_seconds = 4.0  # as at 1,000 nodes: the next forecast 80 s later
    waiting = submit(db, clock, name="b", workers=1, gpu=1, maxRuntime=60)
    cycle(loop, clock)
    estimator.tick()
    got = estimate(db, waiting)
    assert got is not None and got.start_at is None, got
    assert got.unknown.startswith("the forecast has not run since it was submitted"), got
    assert estimator.runs == 1  # the spacing held
    cycle(loop, clock)
    estimator.tick()
    assert estimator.runs == 1
    cycle(loop, clock, 80.0)
    estimator.tick()
    assert estimator.runs == 2
    got = estimate(db, waiting)
    assert got is not None and got.start_at is not None and not got.unknown, got


def test_nothing_new_and_nothing_passed_waits_for_the_interval(env: Env, spaced: Estimator) -> None:
    db, loop, _, clock = env
    estimator = spaced
    submit(db, clock, name="a", workers=2, gpu=4, maxRuntime=HOUR)
    cycle(loop, clock)
    assert estimator.tick()
    cycle(loop, clock)
    cycle(loop, clock)  # the job runs now: a move, but no new job and no passed estimate
    assert not estimator.tick() and estimator.runs == 1
    cycle(loop, clock, HOUR / 2)
    assert not estimator.tick()


def test_a_passed_estimate_is_recomputed(env: Env) -> None:
    """The job it waits for runs past the median of its queue's finished jobs: the
    estimate made from that median passes with nothing else moving, and is made again."""
    db, loop, backend, clock = env
    estimator = Estimator(db, EstimatorConfig(subprocess=False))
    loop.observers.append(estimator.observe)
    done = submit(db, clock, name="done", workers=2, gpu=4)
    backend.durations[done] = 100
    for _ in range(3):
        cycle(loop, clock, 60.0)
    assert phase(db, done) is Phase.SUCCEEDED
    slow = submit(db, clock, name="slow", workers=2, gpu=4)  # all GPUs, no maxRuntime
    backend.durations[slow] = 10 * HOUR
    cycle(loop, clock)
    cycle(loop, clock)
    assert phase(db, slow) is Phase.RUNNING
    waiting = submit(db, clock, name="w", workers=1, gpu=1)
    cycle(loop, clock)
    assert estimator.run_once()
    first = estimate(db, waiting)
    assert first is not None and first.start_at is not None, first
    assert first.start_at.timestamp() > clock.now()
    # Past it (the median of one finished job): `slow` runs on, `w` still waits.
    cycle(loop, clock, first.start_at.timestamp() + 10 - clock.now())
    assert phase(db, waiting) is Phase.PENDING
    assert estimator.run_once()
    again = estimate(db, waiting)
    assert again is not None and again.computed_at > first.computed_at, again
    # No finished job ran this long: the honest answer is "unknown", and why.
    assert again.start_at is None and "longer than any" in again.unknown, again
