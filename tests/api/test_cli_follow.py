"""`shoal submit --follow` / `shoal logs -f` on a job that waits say what it waits for
(phase and reason, again whenever they change) instead of printing nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import Wiring
from scheduler import store
from scheduler.cli import jobs
from scheduler.cli.client import Api
from scheduler.model import PendingReason, ReasonCode

pytestmark = pytest.mark.integration  # starts a thread that follows a job


class NoLogs:
    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return []


@pytest.mark.parametrize("wiring", [Wiring(log_source=NoLogs())])
def test_follow_shows_phase_and_reason_while_pending(
    app: FastAPI, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    jid = client.post("/api/v1/jobs", json=job_body(name="wait", gpu=8), headers=VISION).json()[
        "id"
    ]
    api = Api("http://testserver", "admin-token")
    api.http = TestClient(app, base_url="http://testserver", headers=ADMIN)

    def later() -> None:
        time.sleep(1.0)
        with app.state.database.session() as s:
            store.set_pending_reason(
                session=s,
                job_id=jid,
                reason=PendingReason(ReasonCode.NO_NODE, "needs 8 GPUs on one node; largest is 4"),
            )
        time.sleep(1.5)
        client.post(f"/api/v1/jobs/{jid}/cancel", headers=VISION)

    t = threading.Thread(target=later)
    t.start()
    code = jobs.follow_logs(api, jid, follow=True, worker=None, attempt=None)
    t.join()
    captured = capsys.readouterr()
    assert code == 1
    assert "job wait: Pending - waiting for the scheduler" in captured.err
    assert "Pending - NoFittingNode: needs 8 GPUs on one node; largest is 4" in captured.err
    assert "Cancelled" in captured.out
