"""The loop on the sim backend in virtual time: phases follow workers, maxRuntime,
cancel, and trace replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler import store
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.service import Loop, LoopConfig
from scheduler.sim import replay, trace
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec


@pytest.fixture
def env(tmp_path: Path) -> tuple[store.Database, SimBackend, Loop, VirtualClock]:
    db = store.open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(cluster.load_nodes(), clock)
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    with db.session() as s:
        store.create_queue(session=s, spec=QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    return db, backend, loop, clock


def submit(db: store.Database, clock: VirtualClock, **kw: object) -> str:
    spec = JobSpec.model_validate({"name": "j", "queue": "q", "image": "x", "command": ["c"], **kw})
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=spec, submitter="t", now=as_datetime(clock.now()))
    return row.id


def phase(db: store.Database, job_id: str) -> Phase:
    with db.session() as s:
        return Phase(store.get_job(session=s, job_id=job_id).phase)


def test_phases_follow_workers(env: tuple[store.Database, SimBackend, Loop, VirtualClock]) -> None:
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
    env: tuple[store.Database, SimBackend, Loop, VirtualClock],
) -> None:
    db, backend, loop, clock = env
    job = submit(db, clock, gpu=1, maxRuntime=10)
    backend.durations[job] = 1000
    loop.run_once()
    loop.run_once()
    clock.advance_to(clock.now() + 11)
    loop.run_once()
    assert phase(db, job) is Phase.FAILED
    with db.session() as s:
        events = store.list_events(session=s, job_id=job)
    assert events[-1].reason == "MaxRuntimeExceeded"


def test_cancel_stops_a_running_job(
    env: tuple[store.Database, SimBackend, Loop, VirtualClock],
) -> None:
    db, backend, loop, clock = env
    job = submit(db, clock, gpu=1, terminationGracePeriodSeconds=5)
    loop.run_once()
    loop.run_once()
    with db.session() as s:
        store.cancel_job(session=s, job_id=job, by="t")
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
