"""A deleted job's local files (worker logs, exit files) go with it: `DELETE /jobs/{id}`
and the retention TTL reach only the store, and the loop removes what the local backend
keeps for jobs the store no longer has. A job that is only finished keeps its logs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.backends.local import LocalBackend
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import retention
from scheduler.store.db import open_database
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts local worker processes


def _spec(name: str) -> JobSpec:
    return JobSpec(
        name=name,
        queue="q",
        image="x",
        gpu=1,
        cpu="100m",
        memory="64Mi",
        command=["python", "-c", "print('hello from', __name__)"],
    )


def test_the_loop_removes_the_files_of_deleted_jobs_only(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock()
    backend = LocalBackend(tmp_path / "state")
    loop = Loop(db, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e9))
    try:
        with db.session() as s:
            create_queue(session=s, spec=QueueSpec(name="q", guaranteed=8))
            at = as_datetime(clock.now())
            gone, kept = (
                submit_job(session=s, spec=_spec(n), submitter="t", now=at)[0].id
                for n in ("gone", "kept")
            )

        def phases() -> set[str]:
            with db.session() as s:
                return {get_job(session=s, job_id=j).phase for j in (gone, kept)}

        deadline = time.time() + 120
        while phases() != {Phase.SUCCEEDED} and time.time() < deadline:
            loop.run_once()
            time.sleep(0.05)
        assert phases() == {Phase.SUCCEEDED}
        assert backend.log_files(gone) and backend.log_files(kept)
        assert backend.kept_jobs() == {gone, kept}

        with db.session() as s:
            retention.delete_job(session=s, job_id=gone)
        for _ in range(31):  # the sweep runs every 30th cycle
            loop.run_once()
        assert backend.kept_jobs() == {kept}
        assert backend.log_files(gone) == [] and not (tmp_path / "state" / "jobs" / gone).exists()
        assert "hello from" in backend.log_files(kept)[0][2].read_text()
    finally:
        backend.kill_all()
        backend.close()
        db.close()
