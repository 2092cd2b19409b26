"""`shoal serve --role scheduler` and `shoal serve --role api` as two processes on one store,
the scheduler on the kubernetes backend against the fake API server: a job submitted
through the API process is placed by the scheduler process. Its loop waits 600 s between
idle cycles, so only the API's wake through the database (SQLite: the wake file;
PostgreSQL: NOTIFY) explains the job being placed within the test's deadline."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from support import pg
from support.serve import ROOT, START_S, free_port
from support.wait import eventually

from .conftest import NS, node
from .fakeapi import FakeKube

pytestmark = pytest.mark.integration  # starts two `shoal serve` processes

ADMIN = {"Authorization": "Bearer admin-token"}
TOKENS = "admin-token: {user: root, role: admin}\nmetrics-token: {user: prom, role: metrics}\n"


@contextmanager
def role(
    which: str, tmp: Path, env: dict[str, str], *extra: str
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """`shoal serve --role <which>` on a free port; its URL once /healthz answers."""
    port = free_port()
    log_path = tmp / f"{which}.log"
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--role", which]
    cmd += ["--backend", "kubernetes", "--port", str(port), "--interval", "600", *extra]
    cmd += ["--state-dir", str(tmp / which)]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()
            return httpx.get(f"{url}/healthz", timeout=30).is_success

        eventually(up, START_S, every=0.1, what=f"--role {which}", retry_on=(httpx.HTTPError,))
        yield url, proc, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def environment(kube: FakeKube, tmp: Path, database_url: str) -> dict[str, str]:
    tokens = tmp / "tokens.yaml"
    tokens.write_text(TOKENS)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SHOAL_DATABASE_URL": database_url,
        "SHOAL_API_TOKENS_FILE": str(tokens),
        "SHOAL_WORKER_KEY": "a-worker-key-for-the-test",
        "SHOAL_KUBE_API_URL": kube.url,
        "SHOAL_JOBS_NAMESPACE": NS,
        "SHOAL_LEADER_ELECTION": "false",
        "SHOAL_POD_NAME": "scheduler-0",
    }
    for name in ("SHOAL_ROLE", "SHOAL_API_WORKERS", "SHOAL_BACKEND", "SHOAL_POLICY_FILE"):
        env.pop(name, None)
    return env


def submit_and_see_it_placed(api: str, scheduler: str) -> None:
    with httpx.Client(base_url=api, timeout=60) as c:
        q = c.post("/api/v1/queues", json={"name": "vision", "guaranteed": 4}, headers=ADMIN)
        assert q.status_code == 201, q.text
        body = {"name": "ddp", "queue": "vision", "image": "img:1", "gpu": 1, "workers": 2}
        r = c.post("/api/v1/jobs", json=body, headers=ADMIN)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def placed() -> bool:
            got = c.get(f"/api/v1/jobs/{job_id}", headers=ADMIN)
            assert got.status_code == 200, got.text
            return got.json()["phase"] != "Pending"

        eventually(placed, 60, every=0.1, what="the scheduler process to place the job")
        # The API role serves no logs (the workers are pods: `kubectl logs`).
        assert c.get(f"/api/v1/jobs/{job_id}/logs", headers=ADMIN).status_code == 501
    # The scheduler's port: probes and the cycle metrics, for a scrape token only.
    with httpx.Client(base_url=scheduler, timeout=60) as c:
        assert c.get("/readyz").status_code == 200
        assert c.get("/metrics").status_code == 401
        m = c.get("/metrics", headers={"Authorization": "Bearer metrics-token"})
        assert m.status_code == 200 and "shoal_scheduling_cycles_total" in m.text
        assert c.get("/api/v1/jobs", headers=ADMIN).status_code == 404  # no API here


def run_apart(kube: FakeKube, tmp: Path, database_url: str, *api_flags: str) -> None:
    kube.put("nodes", node("n1", gpus=4))
    env = environment(kube, tmp, database_url)
    with ExitStack() as stack:
        scheduler, _, _ = stack.enter_context(role("scheduler", tmp, env))
        api, _, _ = stack.enter_context(role("api", tmp, env, *api_flags))
        submit_and_see_it_placed(api, scheduler)


def test_the_api_process_wakes_the_scheduler_process_on_sqlite(
    kube: FakeKube, tmp_path: Path
) -> None:
    run_apart(kube, tmp_path, f"sqlite:///{tmp_path / 'shoal.db'}")


@pytest.mark.postgres
def test_two_api_workers_wake_the_scheduler_process_on_postgres(
    kube: FakeKube, tmp_path: Path
) -> None:
    with pg.schema_url("roles") as url:
        run_apart(kube, tmp_path, url, "--api-workers", "2")
