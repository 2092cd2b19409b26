"""Admins' limits through the CR controller (issue 37 item 3): a TrainingJob asking what
its Queue's `allowed` (or the chart's admission.allowed, handed to the watcher) does not
allow becomes Invalid with the REST API's words and reaches no store; a Queue CR carries
its `allowed` into the store."""

from __future__ import annotations

from typing import Any

from scheduler.controller import watcher as crds
from scheduler.spec.allowed import Allowances
from scheduler.store import jobs, queues
from scheduler.store.db import Database

from .reconcilekit import tj


class StatusApi:
    """What the watcher writes, kept instead of sent."""

    def __init__(self) -> None:
        self.status: dict[str, dict[str, Any]] = {}

    def patch_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: dict[str, Any]
    ) -> None:
        self.status[name] = body["status"]

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, ns: str, plural: str, name: str, body: dict[str, Any]
    ) -> None:
        self.status[name] = body["status"]


def watcher(database: Database, chart: dict[str, Any] | None = None) -> tuple[Any, StatusApi]:
    limits = None if chart is None else Allowances.model_validate(chart)
    w = crds.CrWatcher(None, database.session, ("shoal-jobs",), chart_limits=limits)
    api = StatusApi()
    w.api = api
    return w, api


def test_a_trainingjob_asking_the_dangerous_defaults_is_invalid(database: Database) -> None:
    w, api = watcher(database)
    w.queue({"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}}})
    w.trainingjob(tj("crit", priorityClassName="system-node-critical"))
    w.trainingjob(tj("every", tolerations=[{"operator": "Exists"}]))
    crit, every = api.status["crit"], api.status["every"]
    assert crit["phase"] == "Invalid"
    assert crit["reason"].startswith(
        "spec.priorityClassName: PriorityClass 'system-node-critical' is refused by default"
    )
    assert crit["conditions"][0]["reason"] == "AdmissionRefused"
    assert crit["conditions"][0]["status"] == "False"
    assert every["phase"] == "Invalid"
    assert every["reason"].startswith("spec.tolerations.0: a toleration of every taint")
    with database.session() as session:
        assert jobs.list_jobs(session=session).items == []


def test_a_queue_crs_allowed_list_and_the_charts(database: Database) -> None:
    w, api = watcher(database, chart={"priorityClasses": ["team-*"]})
    allowed = {"nodeSelector": {"pool": ["vision-*"]}}
    w.queue({"metadata": {"name": "vision"}, "spec": {"allowed": allowed}})
    with database.session() as session:
        assert queues.load_allowed(session=session)["vision"] == Allowances.model_validate(allowed)

    w.trainingjob(tj("infra", nodeSelector={"pool": "infra"}))
    assert api.status["infra"]["phase"] == "Invalid"
    assert api.status["infra"]["reason"].startswith(
        "spec.nodeSelector.pool: pool='infra' is not allowed: queue 'vision' allows only these"
    )
    w.trainingjob(tj("batch", priorityClassName="batch"))
    assert "the chart allows only these" in api.status["batch"]["reason"]
    w.trainingjob(tj("ok", priorityClassName="team-a", nodeSelector={"pool": "vision-a"}))
    assert api.status["ok"]["phase"] == "Pending"
    with database.session() as session:
        assert [j.name for j in jobs.list_jobs(session=session).items] == ["ok"]
