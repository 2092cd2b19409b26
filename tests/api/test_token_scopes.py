"""Issue 25 item 10: a worker token may only report its own job's progress, and only while
the job is live; a metrics token may only read /metrics (docs/api.md). Everything else is
a 403 saying what the token is for (they read /nodes, /queues, /jobs and the summary)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN, TOKENS, VISION, build_app, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import update

from scheduler import workertoken
from scheduler.store import schema

KEY = "k" * 32
J = "/api/v1/jobs"
METRICS = {"Authorization": "Bearer metrics-token"}


@pytest.fixture
def sapp(tmp_path: Path) -> Iterator[FastAPI]:
    extra = "metrics-token: {user: prom, role: metrics}\n"
    app = build_app(f"sqlite:///{tmp_path / 's.db'}", worker_key=KEY, tokens_yaml=TOKENS + extra)
    yield app
    app.state.database.close()


def _reads(job: str) -> list[str]:
    return [
        "/api/v1/nodes",
        "/api/v1/cluster/summary",
        "/api/v1/queues",
        "/api/v1/queues/vision",
        J,
        f"{J}/{job}",
        f"{J}/{job}/events",
        f"{J}/{job}/explain",
        f"{J}/{job}/logs",
    ]


def test_worker_and_metrics_tokens_read_nothing_but_what_they_are_for(sapp: FastAPI) -> None:
    with TestClient(sapp) as c:
        job = c.post(J, json=job_body(), headers=VISION).json()["id"]
        worker = {"Authorization": f"Bearer {workertoken.mint(KEY, job)}"}
        for headers, why in ((worker, "worker token may only report"), (METRICS, "/metrics")):
            for url in _reads(job):
                r = c.get(url, headers=headers)
                assert r.status_code == 403, (url, r.status_code, r.text[:200])
                assert why in r.json()["detail"][0]["msg"], (url, r.text)
            for url in (f"{J}/{job}/cancel", J):
                assert c.post(url, json=job_body(name="x"), headers=headers).status_code == 403
        assert c.get("/metrics", headers=METRICS).status_code == 200
        assert c.get("/metrics", headers=worker).status_code == 403
        report = {"attempt": 0, "worker": 0, "progress": {"step": 1}}
        assert c.post(f"{J}/{job}/progress", json=report, headers=METRICS).status_code == 403
        assert c.post(f"{J}/{job}/progress", json=report, headers=worker).status_code == 204
        # The team still reads everything it did.
        for url in _reads(job)[:-1]:
            assert c.get(url, headers=VISION).status_code == 200, url
        assert c.get(f"{J}/{job}", headers=ADMIN).json()["phase"] == "Pending"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Cancelled"])
def test_a_worker_token_stops_working_once_its_job_has_finished(sapp: FastAPI, phase: str) -> None:
    with TestClient(sapp) as c:
        job = c.post(J, json=job_body(), headers=VISION).json()["id"]
        worker = {"Authorization": f"Bearer {workertoken.mint(KEY, job)}"}
        report = {"attempt": 0, "worker": 0, "progress": {"step": 1}}
        assert c.post(f"{J}/{job}/progress", json=report, headers=worker).status_code == 204
        with sapp.state.database.session() as s:
            s.execute(update(schema.JobRow).where(schema.JobRow.id == job).values(phase=phase))
            s.commit()
        events = len(c.get(f"{J}/{job}/events", headers=ADMIN).json()["data"])
        r = c.post(f"{J}/{job}/progress", json={**report, "final": True}, headers=worker)
        assert r.status_code == 403, r.text
        assert "has finished" in r.json()["detail"][0]["msg"] and phase in r.text
        assert len(c.get(f"{J}/{job}/events", headers=ADMIN).json()["data"]) == events
