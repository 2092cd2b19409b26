"""A parent queue shows what its children hold (summary, hence `shoal queues`), and GPU
amounts read as people write them (0.9, not 0.8999999999999999)."""

from __future__ import annotations

from conftest import ADMIN
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement


def test_parent_queue_aggregates_children_in_the_summary(app: FastAPI, client: TestClient) -> None:
    with app.state.database.session() as s:
        create_queue(session=s, spec=QueueSpec(name="dept", guaranteed=4))
        create_queue(session=s, spec=QueueSpec(name="team", parent="dept", guaranteed=2))
        for name, frac, gpu in (("a", 0.1, 0), ("b", 0.8, 0), ("c", 1.0, 1)):
            spec = JobSpec(name=name, queue="team", image="x", gpu=frac)
            row, _ = submit_job(session=s, spec=spec, submitter="t")
            record_placement(
                session=s,
                job_id=row.id,
                expected_version=row.version,
                placements=[WorkerPlacement(0, "h1", (gpu,), frac)],
                attempt=1,
            )
    summary = client.get("/api/v1/cluster/summary", headers=ADMIN).json()
    by_name = {q["name"]: q for q in summary["queues"]}
    assert by_name["team"]["allocated"] == 1.9
    assert by_name["dept"]["allocated"] == 1.9  # was 0 while its child held GPUs
    assert by_name["vision"]["allocated"] == 0.0
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes", headers=ADMIN).json()["data"]}
    gpu0 = nodes["h1"]["gpus"][0]
    assert gpu0["allocated"] == 0.9 and gpu0["free"] == 0.1
