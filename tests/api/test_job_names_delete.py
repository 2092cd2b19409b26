"""Names are unique among a queue's live jobs; finished jobs can be deleted (by hand or
by the retention TTL the loop applies); the CLI never silently picks one of several jobs
of the same name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer
from conftest import ADMIN, NLP, VIEWER, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.cli.client import Api
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import retention
from scheduler.store.db import open_database
from scheduler.store.jobs import cancel_job, list_jobs
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job

J = "/api/v1/jobs"


def test_a_second_live_job_of_the_same_name_in_a_queue_is_409(client: TestClient) -> None:
    first = client.post(J, json=job_body(name="train"), headers=VISION).json()
    again = client.post(J, json=job_body(name="train"), headers=VISION)
    assert again.status_code == 409
    (item,) = again.json()["detail"]
    assert item["loc"] == ["body", "name"] and first["id"] in item["msg"]
    assert client.post(J, json=job_body(name="train", queue="nlp"), headers=NLP).status_code == 201
    client.post(f"{J}/{first['id']}/cancel", headers=VISION)  # finished: the name is free
    assert client.post(J, json=job_body(name="train"), headers=VISION).status_code == 201


def test_delete_a_finished_job(client: TestClient) -> None:
    jid = client.post(J, json=job_body(), headers=VISION).json()["id"]
    live = client.delete(f"{J}/{jid}", headers=VISION)
    assert live.status_code == 409 and "cancel it first" in live.json()["detail"][0]["msg"]
    client.post(f"{J}/{jid}/cancel", headers=VISION)
    assert client.delete(f"{J}/{jid}", headers=NLP).status_code == 404  # another team's
    assert client.delete(f"{J}/{jid}", headers=VIEWER).status_code == 403
    assert client.delete(f"{J}/{jid}", headers=VISION).status_code == 204
    assert client.get(f"{J}/{jid}", headers=ADMIN).status_code == 404
    assert client.get(f"{J}/{jid}/events", headers=ADMIN).status_code == 404


def test_the_loop_purges_jobs_finished_before_the_retention(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    clock = VirtualClock(start=10 * 24 * 3600.0)
    loop = Loop(
        db,
        SimBackend(cluster.load_nodes(), clock),
        clock=clock,
        config=LoopConfig(holder="t", lease_ttl_s=1e6, job_retention_s=3 * 24 * 3600),
    )
    ids = {}
    with db.session() as s:
        create_queue(session=s, spec=QueueSpec(name="q", guaranteed=1))
        for name, days_ago in (("old", 5), ("recent", 1), ("live", 9)):
            spec = JobSpec(name=name, queue="q", image="x", gpu=100)  # never fits: stays
            at = as_datetime(clock.now()) - timedelta(days=days_ago)
            ids[name] = submit_job(session=s, spec=spec, submitter="t", now=at)[0].id
            if name != "live":
                cancel_job(session=s, job_id=ids[name], by="t", now=at)
    loop.run_once()
    with db.session() as s:
        left = {j.name for j in list_jobs(session=s).items}
        assert left == {"recent", "live"}
        assert retention.purge_finished(session=s, finished_before=datetime.now(UTC)) == [
            ids["recent"]
        ]
    db.close()


def test_the_cli_names_a_job_or_lists_the_candidates(app: FastAPI, client: TestClient) -> None:
    api = Api("http://testserver", "admin-token")
    api.http = TestClient(app, base_url="http://testserver", headers=ADMIN)
    a = client.post(J, json=job_body(name="exp"), headers=VISION).json()["id"]
    client.post(f"{J}/{a}/cancel", headers=VISION)
    b = client.post(J, json=job_body(name="exp"), headers=VISION).json()["id"]
    assert api.find_job("exp")["id"] == b  # the live one, not merely the newest
    client.post(f"{J}/{b}/cancel", headers=VISION)
    with pytest.raises(typer.Exit):  # two finished ones: ambiguous, says so
        api.find_job("exp")
    assert api.find_job(a)["id"] == a
    assert Phase(api.find_job(b)["phase"]) is Phase.CANCELLED
