"""Stops Shoal decides go through the Eviction API on a real control plane: a reclaim of
a job a PodDisruptionBudget of `maxUnavailable: 0` covers waits (the real disruption
controller writes the budget's status, kube-apiserver refuses the eviction), says so on
the preemptor's reason and the victim's events, and goes on once the budget is relaxed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.backends.kubernetes import names
from scheduler.store.events import list_events
from scheduler.store.rows import get_job

from .conftest import JOBS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
PDB = "keep-borrower"


def budget(cp: ControlPlane) -> Obj | None:
    proc = cp.kubectl("get", "pdb", PDB, "-n", JOBS_NS, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def hold(cp: ControlPlane, job_id: str) -> None:
    """A PDB of `maxUnavailable: 0` over the job's pods, once the disruption controller
    has judged it: no eviction may pass. (Over a TrainingJob's pods it fails safe:
    maxUnavailable needs the pods' controller's scale subresource, which TrainingJob has
    not; kube-apiserver refuses the eviction either way.) The caller deletes it."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PDB, "namespace": JOBS_NS},
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {names.JOB: names.label_value(job_id)}},
        },
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(pdb))

    def judged() -> list[Obj]:
        status = (budget(cp) or {}).get("status") or {}
        said = [c for c in status.get("conditions") or [] if c["type"] == "DisruptionAllowed"]
        assert said and said[0]["status"] == "False", status
        assert not status.get("disruptionsAllowed"), status
        return said

    eventually(judged, timeout=60)


def unhold(cp: ControlPlane) -> None:
    cp.kubectl("delete", "pdb", PDB, "-n", JOBS_NS, "--ignore-not-found", check=False)


def pending(shoal: Shoal, job_id: str) -> str:
    with shoal.database.session() as session:
        return get_job(session=session, job_id=job_id).pending_message or ""


def said(shoal: Shoal, job_id: str) -> list[str]:
    with shoal.database.session() as session:
        return [e.message for e in list_events(session=session, job_id=job_id)]


def test_a_reclaim_waits_for_a_pdb_of_max_unavailable_0_says_so_and_goes_once_relaxed(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-e1", gpus=8)
    queue(cluster, "vision", total=8)
    queue(cluster, "nlp", total=0)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "borrower", queue="nlp", workers=1, gpu=8)
    borrower = eventually(lambda: cluster.tj("borrower").get("status", {}).get("jobId"))
    (victim,) = running(cluster, borrower, 1, shoal)
    hold(cluster, borrower)
    try:
        trainingjob(cluster, "owner", queue="vision", workers=1, gpu=8)
        owner = eventually(lambda: cluster.tj("owner").get("status", {}).get("jobId"))

        # It waits, and says so: on the preemptor's reason, on the victim's events.
        wanted = f"waiting for PodDisruptionBudget {JOBS_NS}/{PDB}:"

        def reason_says() -> str | None:
            reason = pending(shoal, owner)
            return reason if wanted in reason else None

        reason = eventually(reason_says, timeout=90)
        assert borrower in reason, reason
        # Why it allows none, in the disruption controller's words, for the PDB's owner
        # (no scale subresource: it cannot count maxUnavailable over a TrainingJob's pods).
        assert "; SyncFailed: " in reason, reason
        eventually(lambda: any(wanted in m for m in said(shoal, borrower)), timeout=30)
        pods = cluster.job_pods(borrower)
        assert [p["metadata"]["name"] for p in pods] == [victim["metadata"]["name"]]
        assert not pods[0]["metadata"].get("deletionTimestamp")
        assert pods[0]["metadata"]["annotations"][names.STOP_REASON] == "Preempted"
        assert not cluster.job_pods(owner)
        warned = cluster.kubectl(
            "get", "events", "-n", JOBS_NS, "-o", "json",
            "--field-selector", f"involvedObject.name={victim['metadata']['name']}",
        )  # fmt: skip
        reasons = {e["reason"] for e in json.loads(warned.stdout)["items"]}
        assert "EvictionBlocked" in reasons, reasons

        # Relaxed: the next try after the backoff evicts; the owner runs on the node.
        relax = {"spec": {"maxUnavailable": None, "minAvailable": 0}}
        cluster.kubectl(
            "patch", "pdb", PDB, "-n", JOBS_NS, "--type", "merge", "-p", json.dumps(relax)
        )
        eventually(lambda: not cluster.job_pods(borrower), timeout=90)
        running(cluster, owner, 1, shoal)
    finally:
        unhold(cluster)


def test_a_reclaim_prefers_the_victim_no_pdb_holds(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    """Two borrowers of 4 GPUs each: the one of lower priority would go first, but a
    PDB holds it, so the other is reclaimed instead."""
    cluster.add_node("kw-e2", gpus=8)
    queue(cluster, "vision", total=4)
    queue(cluster, "nlp", total=0)
    shoal = start_shoal(shoal_env)
    ids = {}
    for name, priority in (("older", 10), ("newer", 1)):
        trainingjob(cluster, name, queue="nlp", workers=1, gpu=4, priority=priority)
        ids[name] = eventually(lambda n=name: cluster.tj(n).get("status", {}).get("jobId"))
        running(cluster, ids[name], 1, shoal)
    hold(cluster, ids["newer"])
    try:
        backend = shoal.runtime.backend
        eventually(lambda: ids["newer"] in backend.disruption_blocked(), timeout=30)
        trainingjob(cluster, "owner", queue="vision", workers=1, gpu=4)
        owner = eventually(lambda: cluster.tj("owner").get("status", {}).get("jobId"))
        running(cluster, owner, 1, shoal)
        eventually(lambda: not cluster.job_pods(ids["older"]), timeout=60)
        # Still running: (older, requeued, may then preempt it within nlp by priority,
        # and that eviction waits for the PDB too).
        (kept,) = cluster.job_pods(ids["newer"])
        assert not kept["metadata"].get("deletionTimestamp")
    finally:
        unhold(cluster)
