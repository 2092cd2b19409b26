"""Stops Shoal decides go through pods/eviction, so PodDisruptionBudgets hold them; the
owner's stops delete. The fake API server answers evictions as kube-apiserver does
(`fakeevict`); the same on a real control plane is tests/cluster/test_evictions.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend, names
from scheduler.loop.service import Loop
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec
from scheduler.store import queues
from scheduler.store.db import Database
from scheduler.store.events import list_events
from scheduler.store.submission import submit_job

from .conftest import NS, eventually, job, node
from .fakeapi import FakeKube
from .loopkit import advance, pods_of, row

Make = Callable[..., KubernetesBackend]
Obj = dict


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.put("nodes", node("n1"))
    kube.graceful_pod_deletes = True
    return kube


def running(kube: FakeKube, b: KubernetesBackend, job_id: str, count: int) -> None:
    """Launch `job_id` and say its pods run (as the kubelet would)."""
    b.launch(job(job_id, workers=count))
    for p in workers(kube):
        kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Running"}})
    eventually(
        lambda: (
            sum((p.get("status") or {}).get("phase") == "Running" for p in b.pod_cache.items())
            == count
        )
    )


def budget(kube: FakeKube, job_id: str, allowed: int, healthy: int = 2) -> None:
    """A PDB over `job_id`'s pods, with the status its disruption controller would write."""
    kube.put(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "keep", "namespace": NS, "generation": 1},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {names.JOB: job_id}}},
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "desiredHealthy": healthy,
                "expectedPods": healthy,
            },
        },
    )


def workers(kube: FakeKube) -> list[Obj]:
    """The worker pods (a preemption's nominees live in the same namespace here)."""
    return [p for p in kube.objects("pods", NS) if names.JOB_ID in names.annotations_of(p)]


def deleting(kube: FakeKube) -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in workers(kube) if p["metadata"].get("deletionTimestamp")
    )


def test_a_preemption_waits_for_a_pdb_says_so_and_goes_once_it_allows(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    running(cluster, b, "victim", 2)
    budget(cluster, "victim", allowed=0)
    # Before any stop: the fact the core prefers other victims by.
    held = "jobs/keep: allows no disruption now (2 healthy, 2 needed)"
    eventually(lambda: b.disruption_blocked() == {"victim": held})

    b.stop("victim", 30, reason=base.StopReason.PREEMPTED)
    assert deleting(cluster) == []
    assert not [d for d in cluster.deletions if d[0] == "pods"]
    assert [code for *_, code in cluster.evictions] == [429, 429]
    said = "jobs/keep: The disruption budget keep needs 2 healthy pods and has 2 currently"
    assert b.disruption_blocked() == {"victim": said}
    warned = [e for e in cluster.objects("events", NS) if e["reason"] == "EvictionBlocked"]
    assert {e["message"] for e in warned} == {f"waiting for PodDisruptionBudget {said}"}
    assert all(e["type"] == "Warning" for e in warned)

    # The loop's orphan sweep repeats the stop every cycle (as Stopped): within the
    # backoff that costs no API call.
    before = len(cluster.requests)
    for _ in range(5):
        b.stop("victim", 30, reason=base.StopReason.STOPPED)
    assert len(cluster.requests) == before

    budget(cluster, "victim", allowed=2)  # relaxed: the next try after the backoff passes

    def evicted() -> bool:
        b.stop("victim", 30, reason=base.StopReason.STOPPED)
        return len(deleting(cluster)) == 2

    eventually(evicted, timeout=15)
    pods = workers(cluster)
    # Still the first stop's reason (the worker's stop file says Preempted), the grace
    # period as asked, and the API server's DisruptionTarget.
    assert {names.annotations_of(p)[names.STOP_REASON] for p in pods} == {"Preempted"}
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in pods} == {30}
    assert all(
        any(c["type"] == "DisruptionTarget" for c in p["status"]["conditions"]) for p in pods
    )
    assert [code for *_, code in cluster.evictions][-2:] == [201, 201]
    eventually(lambda: b.disruption_blocked() == {})


def test_a_cancel_deletes_through_a_pdb_even_while_an_eviction_waits(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    running(cluster, b, "job", 2)
    budget(cluster, "job", allowed=0)
    eventually(lambda: "job" in b.disruption_blocked())
    b.stop("job", 30, reason=base.StopReason.PREEMPTED)
    assert deleting(cluster) == []
    b.stop("job", 30, reason=base.StopReason.CANCELLED)  # the owner asked: no PDB applies
    assert len(deleting(cluster)) == 2
    assert len([d for d in cluster.deletions if d[0] == "pods"]) == 2
    pods = workers(cluster)
    assert {names.annotations_of(p)[names.STOP_REASON] for p in pods} == {"Cancelled"}


def test_a_broken_gangs_rest_is_evicted_and_an_overloaded_servers_429_retried(
    cluster: FakeKube, make_backend: Make
) -> None:
    """No PDB: the eviction deletes with the grace period. A 429 without a
    DisruptionBudget cause (API Priority and Fairness) is an overload, retried."""
    b = make_backend()
    running(cluster, b, "gang", 2)
    cluster.inject(1, 429, path="/eviction", method="POST")
    b.stop("gang", 20, reason=base.StopReason.FAILED)
    assert len(deleting(cluster)) == 2
    assert [code for *_, code in cluster.evictions] == [201, 201]  # the fault came first
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in workers(cluster)} == {20}
    assert b.disruption_blocked() == {}


def test_a_shrink_evicts_just_its_workers_and_waits_for_a_pdb_without_listing_again(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    running(cluster, b, "elastic", 2)
    budget(cluster, "elastic", allowed=0)
    eventually(lambda: "elastic" in b.disruption_blocked())
    b.shrink("elastic", 0, [1], 15)
    assert deleting(cluster) == [] and [code for *_, code in cluster.evictions] == [429]
    # The loop settles a shrink every cycle: within the backoff, no LIST, no eviction.
    eventually(lambda: "The disruption budget" in b.disruption_blocked().get("elastic", ""))
    before = len(cluster.requests)
    for _ in range(5):
        b.shrink("elastic", 0, [1], 15)
    assert len(cluster.requests) == before

    budget(cluster, "elastic", allowed=1)

    def evicted() -> bool:
        b.shrink("elastic", 0, [1], 15)
        return deleting(cluster) == ["elastic-a0-w1"]

    eventually(evicted, timeout=15)
    gone = next(p for p in workers(cluster) if p["metadata"]["name"] == "elastic-a0-w1")
    assert names.annotations_of(gone)[names.STOP_REASON] == "Resized"
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 15


def test_the_loop_says_a_held_reclaim_once_and_places_the_owner_once_relaxed(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    """The whole path on the fake: nlp borrows n1's 4 GPUs under a PDB that allows
    none, vision reclaims them; the owner's reason names the PDB, the borrower's events
    say it once however many cycles pass, and once the PDB allows it the owner runs."""
    with database.session() as session:
        queues.create_queue(
            session=session, spec=QueueSpec.model_validate({"name": "nlp", "guaranteed": 0})
        )
    borrower = submit(database, "borrower", queue="nlp")

    def launched() -> bool:
        loop.run_once()
        return len(pods_of(kube, borrower)) == 1

    eventually(launched)
    for p in pods_of(kube, borrower):
        kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Running"}})

    def runs() -> bool:
        loop.run_once()
        return row(database, borrower).phase == "Running"

    eventually(runs)
    budget(kube, borrower, allowed=0, healthy=1)
    eventually(lambda: borrower in loop.backend.capabilities().disruptions.disruption_blocked())
    advance(loop, 600)  # past the minimum runtime
    owner = submit(database, "owner", queue="vision")

    def owner_waits() -> str | None:
        loop.run_once()
        message = row(database, owner).pending_message or ""
        assert "waiting for PodDisruptionBudget jobs/keep: " in message, message
        return message

    eventually(owner_waits, timeout=30)
    for _ in range(5):
        loop.run_once()
    assert len(pods_of(kube, borrower)) == 1
    with database.session() as session:
        told = [e.message for e in list_events(session=session, job_id=borrower)]
    assert len([m for m in told if "waiting for PodDisruptionBudget jobs/keep" in m]) == 1, told

    budget(kube, borrower, allowed=1, healthy=1)

    def owner_placed() -> bool:
        loop.run_once()
        return bool(pods_of(kube, owner)) and not pods_of(kube, borrower)

    eventually(owner_placed, timeout=30)
    assert [code for *_, code in kube.evictions][-1] == 201


def submit(database: Database, name: str, *, queue: str) -> str:
    with database.session() as session:
        row, _ = submit_job(
            session=session,
            spec=JobSpec(
                name=name,
                queue=queue,
                image="ghcr.io/x/train:1",
                command=["python", "train.py"],
                gpu=4,
                cpu="1",
                memory="1Gi",
            ),
            submitter="test",
        )
        return row.id


def test_an_adopted_foreign_pod_under_a_pdb_is_held_and_its_preemption_waits(
    kube: FakeKube, make_backend: Make
) -> None:
    from .test_nominees import adopted

    kube.put("nodes", node("n1", gpus=8))
    nb = adopted("nb", 4)
    nb["metadata"]["labels"]["app"] = "notebook"
    kube.put("pods", nb)
    kube.put(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "nb", "namespace": "default", "generation": 1},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "notebook"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": 0,
                       "currentHealthy": 1, "desiredHealthy": 1},
        },
    )  # fmt: skip
    b = make_backend()
    eventually(lambda: "pod:default/nb" in b.disruption_blocked(), timeout=20)
    b.stop("pod:default/nb", 30, reason=base.StopReason.PREEMPTED)
    assert kube.get("pods", "nb", "default") is not None
    assert [code for *_, code in kube.evictions] == [429]
    assert b.disruption_blocked()["pod:default/nb"].startswith("default/nb: The disruption")
