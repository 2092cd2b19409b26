"""The API on a real uvicorn server on a loopback port, driven with httpx over TCP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from conftest import ADMIN, NLP, VISION, build_app, job_body
from support.wait import eventually

pytestmark = pytest.mark.integration  # starts uvicorn on a thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def base_url(tmp_path: Path) -> Iterator[str]:
    app = build_app(f"sqlite:///{tmp_path / 'server.db'}")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    eventually(lambda: server.started, what="uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    app.state.database.close()


def test_over_tcp(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=10) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        r = c.post("/api/v1/jobs", json=job_body(workers=2, gpu=0.5), headers=VISION)
        assert r.status_code == 201
        jid = r.json()["id"]
        assert c.get(f"/api/v1/jobs/{jid}", headers=VISION).json()["phase"] == "Pending"
        assert c.get(f"/api/v1/jobs/{jid}", headers=NLP).status_code == 404
        big = c.post("/api/v1/jobs", content=b"x" * 200_000, headers=VISION)
        assert big.status_code == 413
        assert c.get("/openapi.json").json()["info"]["title"] == "Shoal"
        assert "shoal_jobs" in c.get("/metrics", headers=ADMIN).text


def test_concurrent_idempotent_submissions_make_one_job(base_url: str) -> None:
    results: list[int] = []
    h = {**VISION, "Idempotency-Key": "same"}

    def submit() -> None:
        with httpx.Client(base_url=base_url, timeout=20) as c:
            results.append(c.post("/api/v1/jobs", json=job_body(), headers=h).status_code)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] * 7 + [201]
    with httpx.Client(base_url=base_url) as c:
        assert len(c.get("/api/v1/jobs", headers=ADMIN).json()["data"]) == 1
