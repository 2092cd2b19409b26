"""Issue 29 part 1: a pending job's estimated start and queue position, as the
estimator wrote them, in `GET /jobs/{id}` and the job list; none once it is not pending."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.store import estimates

J = "/api/v1/jobs"
NOW = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)


def test_a_pending_job_shows_when_it_is_estimated_to_start(
    app: FastAPI, client: TestClient
) -> None:
    a = client.post(J, json=job_body(name="first"), headers=VISION).json()["id"]
    b = client.post(J, json=job_body(name="second"), headers=VISION).json()["id"]
    assert client.get(f"{J}/{a}", headers=VISION).json()["estimatedStart"] is None
    with app.state.database.session() as s:
        estimates.replace_all(
            session=s,
            estimates=[
                estimates.StartEstimate(
                    a, NOW + timedelta(hours=1), 1, "maxRuntime of j0", "", NOW
                ),
                estimates.StartEstimate(b, None, 2, "", "waits for j9, runtime unknown", NOW),
            ],
        )
    got = client.get(f"{J}/{a}", headers=VISION).json()["estimatedStart"]
    assert got["position"] == 1 and got["basis"] == "maxRuntime of j0"
    assert datetime.fromisoformat(got["at"]) == NOW + timedelta(hours=1)
    explained = client.get(f"{J}/{a}/explain", headers=VISION).json()["estimatedStart"]
    assert explained == got
    listed = {j["id"]: j["estimatedStart"] for j in client.get(J, headers=ADMIN).json()["data"]}
    assert listed[b]["at"] is None and "runtime unknown" in listed[b]["unknown"]
    assert client.post(f"{J}/{a}/cancel", headers=VISION).status_code == 200
    assert client.get(f"{J}/{a}", headers=VISION).json()["estimatedStart"] is None


def test_a_passed_estimate_is_overdue_never_now(app: FastAPI, client: TestClient) -> None:
    """Issue 35: an estimate whose time has passed while the job still waits read `#1 now`
    for as long as nothing else moved. The API says it is overdue, on its own clock."""
    late = client.post(J, json=job_body(name="late"), headers=VISION).json()["id"]
    ahead = client.post(J, json=job_body(name="ahead"), headers=VISION).json()["id"]
    now = datetime.now(UTC)
    with app.state.database.session() as s:
        estimates.replace_all(
            session=s,
            estimates=[
                estimates.StartEstimate(late, now - timedelta(minutes=2), 1, "b", "", now),
                estimates.StartEstimate(ahead, now + timedelta(hours=1), 2, "b", "", now),
            ],
        )
    got = client.get(f"{J}/{late}", headers=VISION).json()["estimatedStart"]
    assert got["overdue"] is True, got
    assert client.get(f"{J}/{ahead}", headers=VISION).json()["estimatedStart"]["overdue"] is False
    listed = {j["id"]: j["estimatedStart"] for j in client.get(J, headers=ADMIN).json()["data"]}
    assert listed[late]["overdue"] is True and listed[ahead]["overdue"] is False
    assert client.get(f"{J}/{late}/explain", headers=VISION).json()["estimatedStart"] == got
