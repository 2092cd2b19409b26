"""The loop on the sim backend and the in-memory store, in virtual time: phases follow
workers, maxRuntime, cancel, and trace replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.sim import replay, trace
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.memory import MemoryStore
from scheduler.store.port import Storage

from . import jobstores

Env = tuple[MemoryStore, SimBackend, Loop, VirtualClock]


@pytest.fixture
def env() -> Env:
    """The loop on the in-memory store: its logic, no database."""
    db = MemoryStore()
    clock = VirtualClock()
    backend = SimBackend(cluster.load_nodes(), clock)
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    jobstores.add_queue(db, QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    return db, backend, loop, clock


def submit(db: Storage, clock: VirtualClock, **kw: object) -> str:
    spec = JobSpec.model_validate({"name": "j", "queue": "q", "image": "x", "command": ["c"], **kw})
    return jobstores.submit(db, spec, clock.now())


def phase(db: Storage, job_id: str) -> Phase:
    return jobstores.phase(db, job_id)


def test_phases_follow_workers(env: Env) -> None:
    db, backend, loop, clock = env
    job = submit(db, clock, workers=4, gpu=0.25)
    backend.durations[job] = 100
    loop.run_once()
    assert phase(db, job) is Phase.SCHEDULED
    loop.run_once()
    assert phase(db, job) is Phase.RUNNING
    loop.run_once()
    assert backend.launch_count == {(job, 1): 1}  # never launched twice
    clock.advance_to(clock.now() + 101)
    loop.run_once()
    assert phase(db, job) is Phase.SUCCEEDED


def test_max_runtime_fails_the_job(
    env: Env,
) -> None:
    db, backend, loop, clock = env
    job = submit(db, clock, gpu=1, maxRuntime=10)
    backend.durations[job] = 1000
    loop.run_once()
    loop.run_once()
    clock.advance_to(clock.now() + 11)
    loop.run_once()
    assert phase(db, job) is Phase.FAILED
    assert jobstores.events(db, job)[-1][1] == "MaxRuntimeExceeded"


def test_cancel_stops_a_running_job(
    env: Env,
) -> None:
    db, backend, loop, clock = env
    job = submit(db, clock, gpu=1, terminationGracePeriodSeconds=5)
    loop.run_once()
    loop.run_once()
    jobstores.cancel(db, job, clock.now())
    loop.run_once()
    assert phase(db, job) is Phase.CANCELLED
    assert backend.attempts[(job, 1)].stopped_at == clock.now() + 5


def test_replay_of_a_small_trace(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(
        "jobs:\n"
        + "".join(
            f"  - {{name: j{i}, queue: {'ab'[i % 2]}, submit: {i * 10}, duration: 300,"
            " gpu: 0.5, workers: 2}\n"
            for i in range(12)
        )
    )
    rep = replay.simulate(trace.load(f), cluster.load_nodes())
    assert rep.placed == 12 and rep.finished == 12 and rep.never_placed == 0
    assert 0 < rep.mean_utilisation() <= 1
    assert set(rep.delays) == {"a", "b"}


def test_replay_reports_progress_up_to_the_finished_jobs(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(
        "jobs:\n"
        + "".join(
            f"  - {{name: j{i}, queue: a, submit: {i * 30}, duration: 120, gpu: 1}}\n"
            for i in range(6)
        )
    )
    seen: list[tuple[int, int]] = []
    rep = replay.simulate(
        trace.load(f), cluster.load_nodes(), progress=lambda d, n: seen.append((d, n))
    )
    assert len(seen) == rep.cycles
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == rep.finished == 6
    assert {n for _, n in seen} == {6}


def test_alibaba_rows_are_read() -> None:
    path = Path("/work/shared/data/alibaba-gpu-2023/openb_pod_list_default.csv")
    if not path.exists():
        pytest.skip("the Alibaba trace is not on this machine")
    jobs = trace.load(path, limit=50, max_duration_s=3600)
    assert len(jobs) == 50 and all(0 < j.gpu <= 8 and j.duration <= 3600 for j in jobs)
    assert {j.queue for j in jobs} <= {"ls", "be", "burstable", "guaranteed"}
