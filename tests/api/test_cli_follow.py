"""`shoal submit --follow` / `shoal logs -f` on a job that waits say what it waits for
(phase and reason, again whenever they change) instead of printing nothing."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import Wiring
from scheduler.cli import jobs
from scheduler.cli.client import Api
from scheduler.model import PendingReason, ReasonCode
from scheduler.store import estimates
from scheduler.store.estimates import StartEstimate
from scheduler.store.transitions import set_pending_reason

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
            set_pending_reason(
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


@pytest.mark.parametrize("wiring", [Wiring(log_source=NoLogs())])
def test_follow_piped_prints_a_line_per_real_change(
    app: FastAPI, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: piped (captured here: not a terminal, rich's 80 columns), `--follow`
    reprinted its waiting line, wrapped into 3, every second, because "~in 59s" became
    "~in 58s". A new forecast a few seconds off is no news either; a new reason is."""
    jid = client.post("/api/v1/jobs", json=job_body(name="wait", gpu=8), headers=VISION).json()[
        "id"
    ]
    long = "room for 1 of its 2 workers; the other needs 8 free GPUs on one node " + "x" * 40

    def say(message: str, in_s: float) -> None:
        with app.state.database.session() as s:
            reason = PendingReason(ReasonCode.FRAGMENTATION, message)
            set_pending_reason(session=s, job_id=jid, reason=reason)
            now = datetime.now(UTC)
            row = StartEstimate(jid, now + timedelta(seconds=in_s), 1, "median of 3", "", now)
            estimates.replace_all(session=s, estimates=[row])

    say(long, 59)
    api = Api("http://testserver", "admin-token")
    api.http = TestClient(app, base_url="http://testserver", headers=ADMIN)

    def later() -> None:
        time.sleep(2.5)  # polls every 0.5 s: the countdown moves a few seconds
        say(long, 59)  # a new forecast, the same minute
        time.sleep(1.5)
        say("no node has 8 free GPUs", 59)  # news
        time.sleep(1.5)
        client.post(f"/api/v1/jobs/{jid}/cancel", headers=VISION)

    t = threading.Thread(target=later)
    t.start()
    code = jobs.follow_logs(api, jid, follow=True, worker=None, attempt=None)
    t.join()
    lines = capsys.readouterr().err.splitlines()
    assert code == 1
    assert len(lines) == 2, lines
    assert lines[0].startswith("job wait: Pending - Fragmentation: room for 1") and long in lines[0]
    assert "estimated start #1 ~in " in lines[0], lines
    assert "Pending - Fragmentation: no node has 8 free GPUs" in lines[1], lines
