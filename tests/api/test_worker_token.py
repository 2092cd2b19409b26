"""A worker's token is scoped to its own job: progress of that job, nothing else (it
cannot cancel, read or submit, least of all another team's jobs); and `shoal serve`
gives workers no all-queues token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import NLP, VISION, build_app, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler import workertoken
from scheduler.cli.statedir import prepare_state
from scheduler.loop.workerenv import ScopedWorkerEnv

KEY = "k" * 32
J = "/api/v1/jobs"


@pytest.fixture
def wapp(tmp_path: Path) -> Iterator[FastAPI]:
    app = build_app(f"sqlite:///{tmp_path / 'w.db'}", worker_key=KEY)
    yield app
    app.state.database.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_worker_token_reports_its_own_jobs_progress_only(wapp: FastAPI) -> None:
    with TestClient(wapp) as c:
        mine = c.post(J, json=job_body(name="mine"), headers=VISION).json()["id"]
        theirs = c.post(J, json=job_body(name="theirs", queue="nlp"), headers=NLP).json()["id"]
        w = _bearer(ScopedWorkerEnv("http://x", KEY)(mine)["SHOAL_API_TOKEN"])
        report = {"attempt": 1, "worker": 0, "progress": {"step": 1}}
        assert c.post(f"{J}/{mine}/progress", json=report, headers=w).status_code == 204
        assert c.post(f"{J}/{theirs}/progress", json=report, headers=w).status_code == 404
        # Anything else is a 403 for the role (issue 25 item 10), whoever's job it names.
        assert c.post(f"{J}/{theirs}/cancel", headers=w).status_code == 403
        assert c.post(f"{J}/{mine}/cancel", headers=w).status_code == 403
        assert c.get(f"{J}/{theirs}", headers=w).status_code == 403
        assert c.get(J, headers=w).status_code == 403
        assert c.get("/api/v1/queues", headers=w).status_code == 403
        assert c.post(J, json=job_body(name="x"), headers=w).status_code == 403
        # Nothing was cancelled.
        for jid, h in ((mine, VISION), (theirs, NLP)):
            assert c.get(f"{J}/{jid}", headers=h).json()["phase"] == "Pending"


def test_a_forged_or_foreign_key_token_is_refused(wapp: FastAPI) -> None:
    with TestClient(wapp) as c:
        jid = c.post(J, json=job_body(), headers=VISION).json()["id"]
        report = {"attempt": 1, "worker": 0}
        for token in (workertoken.mint("other-key", jid), f"w1.{jid}.deadbeef", "w1."):
            r = c.post(f"{J}/{jid}/progress", json=report, headers=_bearer(token))
            assert r.status_code == 401


def test_serve_writes_no_all_queues_worker_token(tmp_path: Path) -> None:
    (tmp_path / "worker-token").write_text("old-member-token\n")  # an older state dir
    admin, key, tokens = prepare_state(tmp_path, "http://127.0.0.1:1")
    table = yaml.safe_load(tokens.read_text())
    assert list(table) == [admin] and table[admin]["role"] == "admin"
    assert not (tmp_path / "worker-token").exists()
    env = ScopedWorkerEnv("http://x", key)("job1")
    assert workertoken.verify(key, env["SHOAL_API_TOKEN"]) == "job1"
    assert env["SHOAL_API_TOKEN"] not in table
