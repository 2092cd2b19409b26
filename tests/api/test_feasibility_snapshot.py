"""Admission reads queues and nodes from a snapshot (api.feasibility_cache): a stale one
never refuses, and a queue written through the API is seen by the next submission."""

from __future__ import annotations

from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.spec.queue import QueueSpec
from scheduler.store.queues import create_queue


def test_a_queue_made_elsewhere_is_admitted_at_once(app: FastAPI, client: TestClient) -> None:
    assert client.post("/api/v1/jobs", json=job_body(), headers=ADMIN).status_code == 201
    # Written straight to the store, as another replica would: this app's snapshot is stale.
    with app.state.database.session() as s:
        create_queue(session=s, spec=QueueSpec(name="fresh"))
    r = client.post("/api/v1/jobs", json=job_body(queue="fresh"), headers=ADMIN)
    assert r.status_code == 201, r.text


def test_a_limit_lowered_through_the_api_applies_to_the_next_submission(
    client: TestClient,
) -> None:
    assert client.post("/api/v1/jobs", json=job_body(name="a"), headers=VISION).status_code == 201
    r = client.patch("/api/v1/queues/vision", json={"limit": {"total": 8}}, headers=ADMIN)
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/jobs", json=job_body(name="b", workers=9), headers=VISION)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "workers"]


def test_unknown_queue_is_still_refused(client: TestClient) -> None:
    assert client.post("/api/v1/jobs", json=job_body(), headers=ADMIN).status_code == 201
    r = client.post("/api/v1/jobs", json=job_body(queue="nope"), headers=ADMIN)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "queue"]
