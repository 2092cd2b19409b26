"""The sim backend's elastic attempts (`Resizable`): work at the reference size, a grow
that speeds the end up, a shrink that slows it down, a restart for each resize, repeats
that change nothing, removed workers that end after their grace; and the loop resizing
an elastic job on it."""

from __future__ import annotations

import pytest

from scheduler.backends import base
from scheduler.backends.base import StillStopping
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.service import Loop, LoopConfig
from scheduler.model import Config, WorkerPlacement
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.memory import MemoryStore

RUNNING, FAILED = base.WorkerState.RUNNING, base.WorkerState.FAILED


def spec(workers: object = 2, name: str = "el") -> JobSpec:
    return JobSpec.model_validate(
        {"name": name, "queue": "q", "image": "x", "command": ["c"], "workers": workers, "gpu": 1}
    )


def request(size: int, attempt: int = 1) -> base.LaunchRequest:
    places = tuple(WorkerPlacement(w, "n0", (w,), 1.0) for w in range(size))
    return base.LaunchRequest("j", spec({"min": 1, "max": 8}), attempt, places)


@pytest.fixture
def sim() -> SimBackend:
    backend = SimBackend(cluster.load_nodes(), VirtualClock(start=0.0), {"j": 1000.0})
    assert backend.capabilities().resizable is backend
    return backend


def at(sim: SimBackend, t: float) -> dict[int, tuple[base.WorkerState, int | None]]:
    sim.clock.advance_to(t)
    return {w.worker: (w.state, w.exit_code) for w in sim.workers()}


def test_a_rigid_attempt_runs_its_duration(sim: SimBackend) -> None:
    sim.launch(request(2))
    assert sim.attempts[("j", 1)].ends() == 1000.0 and sim.next_event() == 1000.0
    assert at(sim, 999.0) == {0: (RUNNING, None), 1: (RUNNING, None)}
    assert set(at(sim, 1000.0).values()) == {(base.WorkerState.SUCCEEDED, 0)}


def test_a_grow_speeds_the_end_up_after_a_restart(sim: SimBackend) -> None:
    sim.launch(request(2))
    at(sim, 100.0)
    sim.grow(request(4))
    a = sim.attempts[("j", 1)]
    # 100 s done of 1000 at 2 workers; 30 s restart; the 900 s left at 4 workers: 450 s.
    assert a.ends() == pytest.approx(100 + 30 + 450)
    assert a.resized == [(100.0, 2, 4)]
    assert at(sim, 200.0) == {w: (RUNNING, None) for w in range(4)}
    assert set(at(sim, 580.0).values()) == {(base.WorkerState.SUCCEEDED, 0)}
    assert a.held_gpu_s(580.0) == pytest.approx(2 * 580 + 2 * 480)


def test_a_shrink_slows_it_down(sim: SimBackend) -> None:
    sim.launch(request(4))
    at(sim, 100.0)
    sim.shrink("j", 1, [2, 3], 10.0)
    # 100 s done at the reference size of 4; 900 s left at 2 workers: 1800 s.
    assert sim.attempts[("j", 1)].ends() == pytest.approx(100 + 30 + 1800)


def test_the_removed_worker_ends_after_its_grace(sim: SimBackend) -> None:
    sim.launch(request(4))
    at(sim, 100.0)
    sim.shrink("j", 1, [3], 10.0)
    assert sim.next_event() == 110.0
    assert at(sim, 109.0)[3] == (RUNNING, None)
    after = at(sim, 110.0)
    assert after[3] == (FAILED, 143) and [after[w] for w in range(3)] == [(RUNNING, None)] * 3
    (gone,) = [w for w in sim.workers() if w.worker == 3]
    assert gone.message.startswith("Resized") and gone.gpus == (3,)


def test_repeats_do_nothing(sim: SimBackend) -> None:
    sim.launch(request(2))
    at(sim, 100.0)
    sim.grow(request(4))
    a = sim.attempts[("j", 1)]
    end = a.ends()
    at(sim, 200.0)
    sim.grow(request(4))
    sim.launch(request(4))
    assert a.ends() == end and len(a.resized) == 1 and sim.launch_count == {("j", 1): 1}
    sim.shrink("j", 1, [3], 5.0)
    end = a.ends()
    at(sim, 300.0)
    sim.shrink("j", 1, [3], 5.0)
    sim.shrink("j", 1, [7], 5.0)  # not one of its workers
    assert a.ends() == end and len(a.resized) == 2
    assert sim.workers() is not None and len(sim.workers()) == 4  # the removed one stays


def test_a_removed_index_comes_back_only_once_it_has_ended(sim: SimBackend) -> None:
    sim.launch(request(3))
    at(sim, 100.0)
    sim.shrink("j", 1, [2], 30.0)
    with pytest.raises(StillStopping) as exc:
        sim.grow(request(3))
    assert exc.value.transient
    at(sim, 130.0)
    sim.grow(request(3))
    assert [(w.worker, w.state) for w in sim.workers()] == [(w, RUNNING) for w in range(3)]


def test_a_stopped_attempt_is_not_resized_and_the_next_starts_from_nothing(
    sim: SimBackend,
) -> None:
    sim.launch(request(2))
    at(sim, 500.0)
    sim.stop("j", 10.0, reason=base.StopReason.PREEMPTED)
    sim.grow(request(4))
    sim.shrink("j", 1, [1], 10.0)
    assert set(at(sim, 510.0).values()) == {(FAILED, 143)}
    sim.launch(request(4, attempt=2))  # the reference size stays the first launch's, 2
    assert sim.attempts[("j", 2)].ends() == pytest.approx(510.0 + 1000 * 2 / 4)


def test_the_loop_grows_an_elastic_job_and_it_ends_sooner() -> None:
    db = MemoryStore()  # the loop's logic: no database
    clock = VirtualClock()
    sim = SimBackend(cluster.load_nodes(), clock)  # 2 nodes x 4 GPUs
    loop = Loop(db, sim, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    db.add_queue(QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    now = as_datetime(clock.now())
    other = db.submit(spec(6, "b"), job_id="other", now=now)
    sim.durations[other.id] = 100.0
    start = clock.now()
    loop.run_once()  # the 6-GPU job first
    row = db.submit(spec({"min": 1, "max": 4}), job_id="elastic", now=now)
    sim.durations[row.id] = 1000.0
    sim.sizes[row.id] = 4  # its work: 1000 s at 4 workers
    loop.run_once()
    loop.run_once()
    (a,) = [a for (jid, _), a in sim.attempts.items() if jid == row.id]
    assert len(a.placements) == 2  # the 2 GPUs left
    interval = Config().resize_interval_s
    clock.advance_to(start + interval)
    loop.run_once()  # the other job is over: its 6 GPUs idle
    loop.run_once()
    assert a.resized and len(a.placements) == 4
    clock.advance_to(a.ends())
    loop.run_once()
    assert db.ended(job_id=row.id).phase is Phase.SUCCEEDED
    # 300 s at 2 workers (150 s of the 1000 at 4), 30 s restart, 850 s at 4.
    assert a.ends() == pytest.approx(start + interval + 30 + 850)
