"""Cancel and maxRuntime honour `terminationGracePeriodSeconds` as preemption does: the
loop SIGTERMs the workers with the job's grace period and a reason the worker can read,
and no later cycle (the orphan sweep of a job that is no longer live) cuts it short.

The loop runs on a `VirtualClock`: maxRuntime runs out when the test moves the clock, once
the worker is up, not when a loaded machine's interpreter start-up happens to exceed it
(the worker would then die of a SIGTERM it has no handler for yet)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends.local import LocalBackend
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import Database, open_database
from scheduler.store.jobs import cancel_job
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes

# Lingers 1.5 s after SIGTERM (a checkpoint), then exits 0 and says what it was told.
LINGER = (
    "import signal, time, os, sys\n"
    "def term(*a):\n"
    "    why = open(os.environ['SHOAL_STOP_FILE']).read().strip()\n"
    "    pre = os.path.exists(os.environ['SHOAL_PREEMPT_FILE'])\n"
    "    print('TERM', why, 'preempted' if pre else 'not-preempted', flush=True)\n"
    "    time.sleep(1.5)\n"
    "    print('checkpointed', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "print('up', flush=True)\n"
    "time.sleep(120)\n"
)

Env = tuple[Database, LocalBackend, Loop, VirtualClock]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    backend = LocalBackend(tmp_path / "state")
    clock = VirtualClock(time.time())  # from now, so submit times are not in its future
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec.model_validate({"name": "q", "guaranteed": 8}))
    yield db, backend, loop, clock
    backend.kill_all()
    backend.close()
    db.close()


def _submit(db: Database, **kw: object) -> str:
    spec = JobSpec.model_validate(
        {
            "name": "linger",
            "queue": "q",
            "image": "x",
            "gpu": 1,
            "cpu": "100m",
            "memory": "64Mi",
            "command": ["python", "-c", LINGER],
            "terminationGracePeriodSeconds": 30,
            **kw,
        }
    )
    with db.session() as s:
        row, _ = submit_job(session=s, spec=spec, submitter="t")
    return row.id


def _phase(db: Database, job_id: str) -> Phase:
    with db.session() as s:
        return Phase(get_job(session=s, job_id=job_id).phase)


def _cycle_until(loop: Loop, cond: Callable[[], bool], what: str) -> None:
    def cycled() -> bool:
        loop.run_once()
        return cond()

    eventually(cycled, every=0.1, what=what)


def _log(backend: LocalBackend, job_id: str) -> str:
    files = backend.log_files(job_id)
    return files[0][2].read_text() if files else ""


def _exit_code(backend: LocalBackend, job_id: str) -> str | None:
    f = backend.state_dir / "jobs" / job_id / "1" / "worker-0.exit"
    return f.read_text().strip() if f.exists() else None


def _drained(loop: Loop, backend: LocalBackend, job_id: str) -> None:
    # Cycles keep running while the worker checkpoints: none of them may cut it short.
    _cycle_until(loop, lambda: _exit_code(backend, job_id) is not None, "the worker exited")


def test_cancel_gives_the_worker_its_grace_period_and_says_cancelled(env: Env) -> None:
    db, backend, loop, _ = env
    job = _submit(db)
    _cycle_until(loop, lambda: "up" in _log(backend, job), "the worker is up")
    with db.session() as s:
        cancel_job(session=s, job_id=job, by="t")
    _cycle_until(loop, lambda: _phase(db, job) is Phase.CANCELLED, "Cancelled")
    _drained(loop, backend, job)
    assert _exit_code(backend, job) == "0"  # exited on its own, not SIGKILLed
    out = _log(backend, job)
    assert "TERM Cancelled not-preempted" in out and "checkpointed" in out


def test_max_runtime_gives_the_worker_its_grace_period(env: Env) -> None:
    db, backend, loop, clock = env
    job = _submit(db, maxRuntime=1)
    # "up" is printed after the SIGTERM handler is installed; the clock has not moved.
    _cycle_until(loop, lambda: "up" in _log(backend, job), "the worker is up")
    _cycle_until(loop, lambda: _phase(db, job) is Phase.RUNNING, "Running")
    clock.advance_to(clock.now() + 2)  # past maxRuntime 1 s
    _cycle_until(loop, lambda: _phase(db, job) is Phase.FAILED, "Failed (maxRuntime)")
    _drained(loop, backend, job)
    assert _exit_code(backend, job) == "0"
    out = _log(backend, job)
    assert "TERM MaxRuntimeExceeded not-preempted" in out and "checkpointed" in out
