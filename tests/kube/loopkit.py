"""The real scheduler loop and a SQLite store driving a `KubernetesBackend` against the
fake API server, on a virtual clock (fixtures `database` and `loop`, registered by
conftest), and helpers to submit jobs and read them back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends.kubernetes import KubernetesBackend, names
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec
from scheduler.store import queues
from scheduler.store.db import Database, open_database
from scheduler.store.jobs import cancel_job
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

from .fakeapi import FakeKube

NS = "jobs"  # the same as conftest's
Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    with db.session() as session:
        queues.create_queue(
            session=session,
            spec=QueueSpec.model_validate({"name": "vision", "guaranteed": {"total": 8}}),
        )
    yield db
    db.close()


@pytest.fixture
def loop(kube: FakeKube, make_backend: Make, database: Database) -> Loop:
    """A loop over one node `n1` with 4 GPUs (tests may add more), reconcile thread off,
    each launch on the loop's thread: what a cycle decided is done when it returns
    (test_launch_pool covers launches on the backend's pool)."""
    from .conftest import node

    kube.put("nodes", node("n1", gpus=4))
    backend = make_backend(retry_deadline_s=0.3, reconcile_interval_s=0, launch_workers=0)
    return Loop(database, backend, clock=VirtualClock(), config=LoopConfig(interval_s=0.1))


def advance(loop: Loop, seconds: float) -> None:
    clock = loop.clock
    assert isinstance(clock, VirtualClock)
    clock.advance_to(clock.now() + seconds)


def submit(database: Database, name: str, workers: int = 1, gpu: float = 1, **spec: Any) -> str:
    with database.session() as session:
        row, _ = submit_job(
            session=session,
            spec=JobSpec(
                name=name,
                queue="vision",
                framework="pytorch",
                image="ghcr.io/x/train:1",
                command=["python", "train.py"],
                workers=workers,
                gpu=gpu,
                cpu="1",
                memory="1Gi",
                **spec,
            ),
            submitter="test",
        )
        return row.id


def row(database: Database, job_id: str) -> Any:
    with database.session() as session:
        r = get_job(session=session, job_id=job_id)
        session.expunge(r)
        return r


def pods_of(kube: FakeKube, job_id: str) -> list[Obj]:
    return [
        p for p in kube.objects("pods", NS) if names.annotations_of(p).get(names.JOB_ID) == job_id
    ]


def of_job(job_id: str) -> Callable[[Obj], bool]:
    return lambda body: names.annotations_of(body).get(names.JOB_ID) == job_id


def cancel(database: Database, job_id: str) -> None:
    with database.session() as session:
        cancel_job(session=session, job_id=job_id, by="test")
