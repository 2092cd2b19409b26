"""A failed attempt is retried after an exponential backoff (2 s, 4 s, ...), as its
reason BackoffRetry says, not at once on the next cycle."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.backends.local import LocalBackend
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import open_database
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes


def test_retries_back_off_exponentially(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = LocalBackend(tmp_path / "state")
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e9))
    spec = JobSpec(
        name="flaky",
        queue="q",
        image="x",
        gpu=1,
        cpu="100m",
        memory="64Mi",
        command=["python", "-c", "import sys; sys.exit(3)"],
        backoff_limit=5,
    )
    try:
        with db.session() as s:
            create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
            jid = submit_job(session=s, spec=spec, submitter="t", now=as_datetime(clock.now()))[
                0
            ].id

        def job() -> tuple[Phase, int, str]:
            with db.session() as s:
                row = get_job(session=s, job_id=jid)
                last = row.conditions[-1]["message"] if row.conditions else ""
                return Phase(row.phase), row.attempt, last

        def cycle_until_retry_pending(attempt: int) -> str:
            deadline = time.time() + 60
            while time.time() < deadline:
                loop.run_once()
                phase, at, message = job()
                if phase is Phase.PENDING and at == attempt and "retrying" in message:
                    return message
                time.sleep(0.1)
            raise AssertionError(f"attempt {attempt} did not fail: {job()}")

        def cycles(n: int) -> None:
            for _ in range(n):
                loop.run_once()
                time.sleep(0.05)

        assert "retrying in 2s" in cycle_until_retry_pending(1)
        cycles(10)  # time stands still: no new attempt
        assert job()[:2] == (Phase.PENDING, 1)
        clock.advance_to(clock.now() + 2.5)
        assert "retrying in 4s" in cycle_until_retry_pending(2)
        clock.advance_to(clock.now() + 2.5)
        cycles(10)
        assert job()[:2] == (Phase.PENDING, 2)  # 2.5 s is not yet 4 s
        clock.advance_to(clock.now() + 2.0)
        assert "retrying in 8s" in cycle_until_retry_pending(3)
    finally:
        backend.kill_all()
        backend.close()
        db.close()
