"""The CR controller's store poll (issue 24 item 8): a TrainingJob's status follows its
job between relists, and is written only when what it shows moved. The watcher here runs
no threads: each `follow_once` is one poll, so every write can be counted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from scheduler.backends.kubernetes import KubeConfig, api_client
from scheduler.controller.watcher import CrWatcher
from scheduler.spec import Phase
from scheduler.store import jobs, schema
from scheduler.store.db import Database
from scheduler.store.rows import cas_update, get_job

from .conftest import NS
from .fakeapi import FakeKube
from .test_cr_deleted import trainingjob


def _status_patches(kube: FakeKube) -> int:
    return sum(1 for method, path in kube.requests if method == "PATCH" and "trainingjobs" in path)


def _submitted(kube: FakeKube, watcher: CrWatcher, name: str) -> str:
    kube.put("trainingjobs", trainingjob(name))
    watcher.trainingjob(kube.obj("trainingjobs", name, NS))  # as its ADDED event does
    job_id: str = kube.obj("trainingjobs", name, NS)["status"]["jobId"]
    return job_id


def _status(kube: FakeKube, name: str) -> dict[str, Any]:
    return dict(kube.obj("trainingjobs", name, NS)["status"])


def test_status_follows_the_job_and_is_written_only_when_it_moved(
    kube: FakeKube, config: KubeConfig, database: Database
) -> None:
    watcher = CrWatcher(api_client(config), database.session, (NS,), resync_s=300)
    assert watcher.follow_once() == []  # the first poll is the baseline
    job_id = _submitted(kube, watcher, "resnet")
    # New to the poll: the stored job's whole status (placements, attempt, SpecApplied),
    # as the MODIFIED event of the submission's own patch would write it.
    assert watcher.follow_once() == [job_id]
    assert _status(kube, "resnet")["phase"] == "Pending"
    written = _status_patches(kube)
    assert watcher.follow_once() == []
    watcher.trainingjob(kube.obj("trainingjobs", "resnet", NS))  # a relist: nothing moved
    assert _status_patches(kube) == written
    # The pending reason's text alone is left to the relist (a cycle rewrites it often).
    with database.session() as session:
        row = get_job(session=session, job_id=job_id)
        values = {"pending_message": "waits for 1 GPU"}
        cas_update(session, job_id=job_id, expected_version=row.version, values=values)
        session.commit()
    assert watcher.follow_once() == []
    # Cancelled through the REST API: no event on the CR, yet its status follows.
    with database.session() as session:
        jobs.cancel_job(session=session, job_id=job_id, by="alice")
    assert watcher.follow_once() == [job_id]
    status = _status(kube, "resnet")
    assert status["phase"] == Phase.CANCELLED.value, status
    assert {c["type"]: c["status"] for c in status["conditions"]}["Finished"] == "True"
    assert _status_patches(kube) == written + 1
    assert watcher.follow_once() == []
    assert _status_patches(kube) == written + 1


def test_a_recreated_trainingjob_gets_no_status_of_the_old_job(
    kube: FakeKube, config: KubeConfig, database: Database
) -> None:
    watcher = CrWatcher(api_client(config), database.session, (NS,), resync_s=300)
    watcher.follow_once()
    job_id = _submitted(kube, watcher, "bert")
    watcher.follow_once()
    kube.remove("trainingjobs", "bert", NS)  # deleted and made again: a new uid
    kube.put("trainingjobs", trainingjob("bert"))
    with database.session() as session:
        jobs.cancel_job(session=session, job_id=job_id, by="alice")
    written = _status_patches(kube)
    assert watcher.follow_once() == []
    assert _status_patches(kube) == written
    assert "status" not in kube.obj("trainingjobs", "bert", NS)


def test_finished_jobs_leave_the_poll_after_the_window(
    kube: FakeKube, config: KubeConfig, database: Database
) -> None:
    watcher = CrWatcher(api_client(config), database.session, (NS,), resync_s=300)
    watcher.follow_once()
    job_id = _submitted(kube, watcher, "gpt")
    with database.session() as session:
        jobs.cancel_job(session=session, job_id=job_id, by="alice")
        assert [c.job_id for c in watcher.follower.changed(session)] == [job_id]
        assert watcher.follower.changed(session) == []
        later = schema.utcnow() + timedelta(hours=1)
        assert watcher.follower.changed(session, now=later) == []  # out of the window
        assert watcher.follower.changed(session, now=later) == []
