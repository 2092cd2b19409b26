"""The CLI against the real API app (issue 25): worker output is written as it is, the
latest progress is the latest, and the everyday verbs (explain, queue update/delete,
submit's scheduling flags, the jobs table, the queue tree) say what the API knows."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ADMIN, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from scheduler.cli import client as cli_client
from scheduler.cli.main import app as cli
from scheduler.store import jobs as store_jobs

Shoal = Callable[..., Result]


@pytest.fixture
def shoal(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shoal]:
    """`shoal ARGS...` run in-process against `app` as the admin."""
    real = cli_client.Api.__init__

    def via_testclient(
        self: cli_client.Api, url: str | None = None, token: str | None = None
    ) -> None:
        real(self, "http://testserver", "admin-token")
        self.http = TestClient(app, base_url="http://testserver", headers=ADMIN)

    monkeypatch.setattr(cli_client.Api, "__init__", via_testclient)
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args))

    yield run


class OneLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return [(1, 0, self.path)]


def test_logs_are_not_wrapped_when_piped(
    app: FastAPI, client: TestClient, shoal: Shoal, tmp_path: Path
) -> None:
    """issue 25 item 3: a 600-character line came out as 8 lines of 80."""
    long = "x" * 300 + " " + "[bold]y[/bold] :smile: " + "z" * 300
    log = tmp_path / "worker-0.log"
    log.write_text(f"{long}\nsecond\rline\n")
    app.state.log_source = OneLog(log)
    jid = client.post("/api/v1/jobs", json=job_body(name="wide"), headers=ADMIN).json()["id"]
    result = shoal("logs", jid)
    assert result.exit_code == 0, result.output
    assert result.output == f"w0 {long}\nw0 second\rline\n"


def test_job_shows_the_latest_progress_and_events_oldest_first(
    app: FastAPI, client: TestClient, shoal: Shoal
) -> None:
    """issue 25 item 5: the events query string was dropped, so the page came oldest
    first, was reversed, and the "latest" progress was the first one."""
    jid = client.post("/api/v1/jobs", json=job_body(name="steps"), headers=ADMIN).json()["id"]
    start = datetime.now(UTC) - timedelta(hours=1)
    with app.state.database.session() as s:
        for step in range(0, 141):
            at = start + timedelta(seconds=step)
            store_jobs.add_event(
                s, job_id=jid, kind="Progress", message=f"step {step}", data={"step": step}, at=at
            )
        store_jobs.add_event(s, job_id=jid, kind="Note", reason="First", at=start)
        store_jobs.add_event(
            s, job_id=jid, kind="Note", reason="Last", at=start + timedelta(seconds=200)
        )
        s.commit()
    result = shoal("job", "steps")
    assert result.exit_code == 0, result.output
    assert "step 140" in result.output and not re.search(r"\bstep 0\b", result.output)
    assert result.output.index("First") < result.output.index("Last")
