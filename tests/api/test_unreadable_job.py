"""Issue 15, fault 1 at the API: a stored job whose values today's validation refuses (an
older version let in `maxRuntime` 10**400) fails no read for anyone: not the listings,
not the inventory and summary, not /metrics, not another job's explain."""

from __future__ import annotations

from conftest import ADMIN, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from scheduler.store import schema

API = "/api/v1"


def test_an_unreadable_stored_job_breaks_no_endpoint(app: FastAPI, client: TestClient) -> None:
    ids = {}
    for name in ("bad", "good"):
        r = client.post(f"{API}/jobs", json=job_body(name=name), headers=VISION)
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    with app.state.database.session() as s:
        raw = dict(
            s.scalars(select(schema.JobRow.spec).where(schema.JobRow.id == ids["bad"])).one()
        )
        raw["maxRuntime"] = 10**400
        s.execute(update(schema.JobRow).where(schema.JobRow.id == ids["bad"]).values(spec=raw))
        s.commit()
    for url in (
        f"{API}/nodes",
        f"{API}/cluster/summary",
        "/metrics",
        f"{API}/jobs",
        f"{API}/jobs/{ids['bad']}",
        f"{API}/jobs/{ids['good']}/explain",
        f"{API}/jobs/{ids['bad']}/explain",
        f"{API}/queues",
    ):
        r = client.get(url, headers=ADMIN)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
    listed = client.get(f"{API}/jobs", headers=ADMIN).json()["data"]
    assert {j["name"] for j in listed} == {"bad", "good"}
    assert client.get(f"{API}/jobs/{ids['good']}/explain", headers=ADMIN).json()["decision"] == (
        "placed"
    )
