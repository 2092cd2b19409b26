"""A TrainingJob's identity travels typed: reconcile puts the CR (kind, namespace, name,
uid) on the Submit as an `Origin`, apply stores it in the job's origin columns, and the
loop hands it to the backend as `LaunchRequest.owner` (tests/kube checks the pods)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.controller import apply as applying
from scheduler.controller import reconcile
from scheduler.spec import TRAININGJOB, JobSpec, Origin
from scheduler.spec.queue import QueueSpec
from scheduler.store import queues
from scheduler.store.db import Database, open_database
from scheduler.store.live import live_jobs
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job


def tj(name: str, uid: str | None) -> dict[str, Any]:
    meta = {"name": name, "namespace": "shoal-jobs", "generation": 1}
    if uid is not None:
        meta["uid"] = uid
    return {"metadata": meta, "spec": {"queue": "vision", "image": "x:1", "gpu": 1}}


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    with db.session() as s:
        queues.create_queue(session=s, spec=QueueSpec(name="vision"))
    yield db
    db.close()


@pytest.mark.parametrize(
    ("uid", "origin"),
    [
        ("uid-1", Origin(TRAININGJOB, "shoal-jobs", "resnet", "uid-1")),
        (None, Origin(TRAININGJOB, "shoal-jobs", "resnet", "")),  # no uid: no owner refs
    ],
)
def test_a_submitted_cr_is_stored_with_its_origin(
    database: Database, uid: str | None, origin: Origin
) -> None:
    outcome = reconcile.reconcile_trainingjob(tj("resnet", uid), None)
    assert isinstance(outcome.action, reconcile.Submit)
    assert outcome.action.origin == origin
    with database.session() as s:
        status = applying.apply(s, outcome)
        assert get_job(session=s, job_id=status["jobId"]).origin == origin
        (live,) = live_jobs(session=s)
        assert live.origin == origin


def test_a_rest_job_has_no_origin(database: Database) -> None:
    spec = JobSpec(name="bert", queue="vision", image="x:1", gpu=1)
    with database.session() as s:
        submit_job(session=s, spec=spec, submitter="alice", idempotency_key="cr:x")
        (live,) = live_jobs(session=s)
        assert live.origin is None
