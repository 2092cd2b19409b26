"""Issue 29 part 1: the dashboard's job list and job page show a pending job's queue
position and estimated start, or that it is unknown and why."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from scheduler.store import estimates

TOKENS = "ann-token: {user: ann, role: admin}\n"
AUTH = {"Authorization": "Bearer ann-token"}
NOW = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", tokens_yaml=TOKENS))
    with TestClient(app) as c:
        page = c.get("/ui/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        c.post("/ui/login", data={"token": "ann-token", "csrf": csrf.group(1)})
        yield c
    app.state.database.close()


def test_the_estimate_is_on_the_job_list_and_page(client: TestClient) -> None:
    queue = {"name": "vision", "guaranteed": 8}
    assert client.post("/api/v1/queues", json=queue, headers=AUTH).status_code == 201
    body = {"name": "wait", "queue": "vision", "image": "x", "command": ["c"], "gpu": 1}
    job = client.post("/api/v1/jobs", json=body, headers=AUTH).json()["id"]
    body["name"] = "later"
    other = client.post("/api/v1/jobs", json=body, headers=AUTH).json()["id"]
    with client.app.state.database.session() as s:  # type: ignore[attr-defined]
        at = datetime(2026, 12, 5, 3, 30, tzinfo=UTC)
        estimates.replace_all(session=s, estimates=[
            estimates.StartEstimate(job, at, 1, "median of 5", "", NOW),
            estimates.StartEstimate(other, None, 2, "", "waits for j9, runtime unknown", NOW),
        ])  # fmt: skip
    listing = client.get("/ui/jobs").text
    cell = re.search(r'data-testid="eta-wait">(.*?)</td>', listing, re.S)
    assert cell is not None and "#1 2026-12-05 03:30" in cell.group(1), listing[-2000:]
    assert "runtime unknown" in listing
    page = client.get(f"/ui/jobs/{job}").text
    assert "Position 1" in page and "median of 5" in page


def test_a_passed_estimate_is_shown_overdue(client: TestClient) -> None:
    """Issue 35: a passed estimate of a job that still waits is marked overdue (the CLI
    read it as "now"); one still ahead is not."""
    queue = {"name": "vision", "guaranteed": 8}
    assert client.post("/api/v1/queues", json=queue, headers=AUTH).status_code == 201
    body = {"name": "late", "queue": "vision", "image": "x", "command": ["c"], "gpu": 1}
    late = client.post("/api/v1/jobs", json=body, headers=AUTH).json()["id"]
    body["name"] = "ahead"
    ahead = client.post("/api/v1/jobs", json=body, headers=AUTH).json()["id"]
    now = datetime.now(UTC)
    with client.app.state.database.session() as s:  # type: ignore[attr-defined]
        estimates.replace_all(session=s, estimates=[
            estimates.StartEstimate(late, now - timedelta(minutes=5), 1, "median of 5", "", now),
            estimates.StartEstimate(ahead, now + timedelta(hours=2), 2, "median of 5", "", now),
        ])  # fmt: skip
    listing = client.get("/ui/jobs").text
    cells = dict(re.findall(r'data-testid="eta-(\w+)">(.*?)</td>', listing, re.S))
    assert "overdue" in cells["late"] and "overdue" not in cells["ahead"], cells
    assert "#1 " in cells["late"] and "#2 " in cells["ahead"], cells
    page = client.get(f"/ui/jobs/{late}").text
    assert "overdue" in page and "median of 5" in page
    assert "overdue" not in client.get(f"/ui/jobs/{ahead}").text
