"""A job whose values no process can take (stored before validation refused them) fails
with the true reason; the cycle goes on and schedules the other jobs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.backends.local import LocalBackend
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import open_database
from scheduler.store.events import list_events
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes


def test_a_launch_error_is_the_jobs_failure_not_the_cycles(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    backend = LocalBackend(tmp_path / "state")
    loop = Loop(db, backend, config=LoopConfig(holder="t", lease_ttl_s=1e6))
    base = {"queue": "q", "image": "x", "gpu": 1, "cpu": "100m", "memory": "64Mi"}
    good = JobSpec.model_validate({**base, "name": "good", "command": ["python", "-c", "pass"]})
    # What an older version let in: the validation of today refuses it at submission.
    bad = good.model_copy(update={"name": "bad", "env": {"A=B": "1"}})
    try:
        with db.session() as s:
            create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
            bad_id = submit_job(session=s, spec=bad, submitter="t")[0].id
            good_id = submit_job(session=s, spec=good, submitter="t")[0].id

        def phases() -> tuple[Phase, Phase]:
            with db.session() as s:
                return tuple(  # type: ignore[return-value]
                    Phase(get_job(session=s, job_id=j).phase) for j in (bad_id, good_id)
                )

        deadline = time.time() + 60
        while phases() != (Phase.FAILED, Phase.SUCCEEDED) and time.time() < deadline:
            loop.run_once()  # raises if one job's trouble fails the cycle
            time.sleep(0.1)
        assert phases() == (Phase.FAILED, Phase.SUCCEEDED)
        with db.session() as s:
            last = list_events(session=s, job_id=bad_id)[-1]
        assert "cannot start the worker" in last.message, last.message
        assert "service stopped" not in last.message
    finally:
        backend.kill_all()
        backend.close()
        db.close()
