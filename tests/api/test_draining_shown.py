"""Issue 25 item 1: GPUs held by workers in their grace period are shown as draining,
not idle, everywhere the inventory is shown, and the job says so until they are gone.
The real loop on the local backend: a worker that ignores SIGTERM keeps its GPU for the
whole grace period after its job is cancelled."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.backends.local import LocalBackend
from scheduler.loop.service import Loop, LoopConfig
from scheduler.model import Node
from scheduler.spec import Phase
from scheduler.store.rows import get_job

pytestmark = pytest.mark.integration  # starts local worker processes

J = "/api/v1/jobs"
# The worker says when it is deaf: SIGTERM sent before Python has run that line would
# stop it at once (seen on a busy CI machine), and nothing would be left draining.
DEAF = (
    "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " pathlib.Path(sys.argv[1]).touch(); time.sleep(120)"
)


def _until(loop: Loop, check: object, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not check():  # type: ignore[operator]
        assert time.time() < deadline, "not reached in time"
        loop.run_once()
        time.sleep(0.05)


def _phase(app: FastAPI, job_id: str) -> Phase:
    with app.state.database.session() as s:
        return Phase(get_job(session=s, job_id=job_id).phase)


def _stopping(client: TestClient, job_id: str) -> bool:
    conditions = client.get(f"{J}/{job_id}", headers=VISION).json()["conditions"]
    return any(c["type"] == "WorkersStopping" for c in conditions)


def test_a_cancelled_jobs_gpu_shows_draining_until_its_worker_is_gone(
    app: FastAPI, client: TestClient, tmp_path: Path
) -> None:
    backend = LocalBackend(
        tmp_path / "state", nodes=[Node("h1", 96_000, 1_000_000, 2, "H100-80GB", 81920)]
    )
    loop = Loop(app.state.database, backend, config=LoopConfig(holder="t"))
    try:
        deaf = tmp_path / "deaf"
        body = job_body(command=["python", "-c", DEAF, str(deaf)], cpu="100m", memory="64Mi")
        job_id = client.post(J, json=body, headers=VISION).json()["id"]
        _until(loop, deaf.exists)
        assert _phase(app, job_id) is Phase.RUNNING
        assert client.post(f"{J}/{job_id}/cancel", headers=VISION).status_code == 200
        _until(loop, lambda: _phase(app, job_id) is Phase.CANCELLED)
        loop.run_once()

        job = client.get(f"{J}/{job_id}", headers=VISION).json()
        (stopping,) = [c for c in job["conditions"] if c["type"] == "WorkersStopping"]
        assert (
            stopping["status"] == "True"
            and "1 worker(s) of attempt 1 still stopping" in (stopping["message"])
        )
        (node,) = client.get("/api/v1/nodes", headers=VISION).json()["data"]
        shares = [s for g in node["gpus"] for s in g["shares"]]
        assert [(s["jobId"], s["draining"]) for s in shares] == [(job_id, True)]
        assert 0 <= shares[0]["stopsInSeconds"] <= 30
        gpus = client.get("/api/v1/cluster/summary", headers=VISION).json()["gpus"]
        assert (gpus["total"], gpus["allocated"], gpus["idle"], gpus["draining"]) == (2, 1, 1, 1)
        metrics = client.get("/metrics", headers=ADMIN).text
        assert "shoal_gpus_draining 1.0" in metrics

        backend.kill_all()  # the worker is gone: the GPU is free, and shown so
        _until(loop, lambda: not _stopping(client, job_id))
        gpus = client.get("/api/v1/cluster/summary", headers=VISION).json()["gpus"]
        assert (gpus["allocated"], gpus["draining"]) == (0, 0)
    finally:
        backend.kill_all()
        backend.close()
