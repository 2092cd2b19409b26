"""The submission's answer is serialized by the route itself (not through FastAPI's
`response_model`): it must say what a read of the job says, and match its schema."""

from __future__ import annotations

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import models

API = "/api/v1"


def test_the_submit_answer_is_the_job_as_read_back(client: TestClient) -> None:
    h = {**VISION, "Idempotency-Key": "k-1"}
    body = job_body(workers=2, gpu=0.5, priority=7, command=["python", "train.py"])
    created = client.post(f"{API}/jobs", json=body, headers=h)
    assert created.status_code == 201, created.text
    assert created.headers["content-type"] == "application/json"
    read = client.get(f"{API}/jobs/{created.json()['id']}", headers=VISION)
    assert created.json() == read.json()
    replay = client.post(f"{API}/jobs", json=body, headers=h)
    assert replay.status_code == 200 and replay.json() == read.json()
    models.JobPublic.model_validate(created.json())  # camelCase aliases, every field


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_queue_priority_is_the_default_and_a_live_name_is_refused(
    db: str, request: pytest.FixtureRequest
) -> None:
    app: FastAPI = request.getfixturevalue("app" if db == "sqlite" else "pg_app")
    with TestClient(app) as client:
        r = client.patch(f"{API}/queues/vision", json={"priority": 5}, headers=ADMIN)
        assert r.status_code == 200, r.text
        r = client.post(f"{API}/jobs", json=job_body(), headers=VISION)
        assert r.status_code == 201 and r.json()["priority"] == 5, r.text
        own = client.post(f"{API}/jobs", json=job_body(name="own", priority=1), headers=VISION)
        assert own.status_code == 201 and own.json()["priority"] == 1, own.text
        again = client.post(f"{API}/jobs", json=job_body(), headers=VISION)
        assert again.status_code == 409, again.text
        assert again.json()["detail"][0]["loc"] == ["body", "name"]
        jobs = client.get(f"{API}/jobs", headers=VISION).json()["data"]
        assert sorted(j["name"] for j in jobs) == ["own", "train"]
        events = client.get(f"{API}/jobs/{r.json()['id']}/events", headers=VISION).json()
        assert [e["kind"] for e in events["data"]] == ["Submitted"]
