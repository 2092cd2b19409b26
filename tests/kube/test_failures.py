"""Failures on a real cluster, through the loop: resources are free when the kubelet says
so (a draining attempt holds its GPUs until its pods are gone; never a force delete), and
the infrastructure's failures (node gone or long NotReady, DisruptionTarget, a kubelet
admission rejection, pods gone after a completed launch) re-place the job without using
up its backoffLimit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from scheduler.backends.base import WorkerState
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.client.objects import graceful
from scheduler.backends.kubernetes.view import status
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import Phase
from scheduler.store import jobs
from scheduler.store.db import Database

from .conftest import NS, eventually, node
from .fakeapi import FakeKube
from .loopkit import advance, pods_of, row, submit
from .test_fractional import RES, run_reserve

Make = Callable[..., KubernetesBackend]


def backend_of(loop: Loop) -> KubernetesBackend:
    assert isinstance(loop.backend, KubernetesBackend)
    return loop.backend


def settle(loop: Loop, kube: FakeKube, check_pods: int | None = None) -> None:
    """Wait until the backend's pod cache shows what the fake server holds."""
    b = backend_of(loop)
    want = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in kube.objects("pods")}
    eventually(
        lambda: (
            {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in b.pod_cache.items()}
            == want
        ),
        timeout=10,
    )


def set_phase(kube: FakeKube, name: str, phase: str, **extra: object) -> None:
    kube.update("pods", name, NS, {"status": {"phase": phase, **extra}})


def test_grace_is_never_zero_nor_truncated() -> None:
    assert [graceful(g) for g in (0, 0.0, 0.2, 1, 1.5, 30)] == [1, 1, 1, 1, 2, 30]


def test_a_pending_victims_gpus_stay_held_until_its_pod_is_gone(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    kube.graceful_pod_deletes = True
    first = submit(database, "first", gpu=4)
    loop.run_once()
    (pod,) = pods_of(kube, first)
    assert pod["spec"]["nodeName"] == "n1"  # bound; still Pending (pulling its image)
    with database.session() as session:
        jobs.cancel_job(session=session, job_id=first, by="test")
    second = submit(database, "second", gpu=4)
    settle(loop, kube)
    for _ in range(3):
        loop.run_once()
        settle(loop, kube)
    assert row(database, first).phase == Phase.CANCELLED.value
    (gone,) = pods_of(kube, first)
    assert gone["metadata"].get("deletionTimestamp")  # terminating, not force-deleted
    assert all(g is not None and g >= 1 for r, _, _, g in kube.deletions if r == "pods")
    # The kubelet has not said the pod is gone: its 4 GPUs are not free yet.
    assert row(database, second).phase == Phase.PENDING.value and pods_of(kube, second) == []
    kube.remove("pods", gone["metadata"]["name"], NS)
    settle(loop, kube)
    loop.run_once()
    assert row(database, second).phase == Phase.SCHEDULED.value


def test_a_worker_on_a_node_that_is_gone_is_replaced_elsewhere(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    kube.put("nodes", node("n2", gpus=4))
    job_id = submit(database, "mobile", gpu=4)  # backoffLimit 0
    loop.run_once()
    (pod,) = pods_of(kube, job_id)
    first_node = pod["spec"]["nodeName"]
    set_phase(kube, pod["metadata"]["name"], "Running")
    settle(loop, kube)
    loop.run_once()
    assert row(database, job_id).phase == Phase.RUNNING.value
    kube.remove("nodes", first_node)
    eventually(lambda: len(backend_of(loop).node_cache.items()) == 1)
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.PENDING.value and r.restarts == 1
    assert f"node {first_node} is gone" in r.conditions[-1]["message"]
    advance(loop, 6)  # the per-job backoff of an interrupted attempt
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.SCHEDULED.value and r.attempt == 2
    other = "n2" if first_node == "n1" else "n1"
    new = [p for p in pods_of(kube, job_id) if "-a2-" in p["metadata"]["name"]]
    assert [p["spec"]["nodeName"] for p in new] == [other]


def test_a_disruption_target_fails_the_attempt_but_its_gpus_stay_held(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    kube.graceful_pod_deletes = True
    job_id = submit(database, "evicted", gpu=4)
    loop.run_once()
    (pod,) = pods_of(kube, job_id)
    name = pod["metadata"]["name"]
    set_phase(kube, name, "Running")
    settle(loop, kube)
    loop.run_once()
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    kube.update("pods", name, NS, {"status": {"conditions": [cond]}})
    settle(loop, kube)
    (w,) = backend_of(loop).workers()
    assert (w.state, w.retryable, w.still_running) == (WorkerState.FAILED, True, True)
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.PENDING.value and r.restarts == 1  # backoffLimit 0, not Failed
    settle(loop, kube)
    advance(loop, 6)  # past the backoff: only its own pod, still running, holds it back
    for _ in range(2):  # still running on its 4 GPUs: not placed again yet
        loop.run_once()
        settle(loop, kube)
    assert row(database, job_id).phase == Phase.PENDING.value
    kube.remove("pods", name, NS)
    settle(loop, kube)
    advance(loop, 6)
    loop.run_once()
    assert row(database, job_id).phase == Phase.SCHEDULED.value


def test_an_evicted_worker_whose_node_is_gone_holds_nothing(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    """An eviction leaves the pod Terminating with its DisruptionTarget; with no kubelet
    left to finish it (its node deleted, no pod GC) it would stay for ever, and the
    attempt with it: a worker whose node is gone is no longer running, whatever its
    conditions say, and the job is placed again elsewhere."""
    kube.graceful_pod_deletes = True
    kube.put("nodes", node("n2", gpus=4))
    job_id = submit(database, "stranded", gpu=4)
    loop.run_once()
    (pod,) = pods_of(kube, job_id)
    name, first_node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    set_phase(kube, name, "Running")
    settle(loop, kube)
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    kube.update("pods", name, NS, {"status": {"conditions": [cond]}})
    settle(loop, kube)
    (w,) = backend_of(loop).workers()
    assert w.still_running  # on a live node its containers may still run
    kube.remove("nodes", first_node)
    eventually(lambda: len(backend_of(loop).node_cache.items()) == 1)
    (w,) = backend_of(loop).workers()
    assert (w.state, w.retryable, w.still_running) == (WorkerState.FAILED, True, False)
    loop.run_once()
    settle(loop, kube)
    advance(loop, 6)
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.SCHEDULED.value and r.attempt == 2
    assert kube.get("pods", name, NS) is not None  # the old pod is still there


def test_a_kubelet_admission_rejection_is_retried_without_using_backoff_limit(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    job_id = submit(database, "admitted", gpu=2)
    loop.run_once()
    (pod,) = pods_of(kube, job_id)
    set_phase(
        kube,
        pod["metadata"]["name"],
        "Failed",
        reason="UnexpectedAdmissionError",
        message="Allocate failed due to no healthy devices present",
    )
    settle(loop, kube)
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.PENDING.value and r.restarts == 1
    assert "UnexpectedAdmissionError" in r.conditions[-1]["message"]
    settle(loop, kube)
    advance(loop, 6)
    loop.run_once()
    assert row(database, job_id).phase == Phase.SCHEDULED.value
    # The job's own failure still counts: backoffLimit 0 means Failed.
    (new,) = [p for p in pods_of(kube, job_id) if "-a2-" in p["metadata"]["name"]]
    set_phase(kube, new["metadata"]["name"], "Failed", reason="Error")
    settle(loop, kube)
    loop.run_once()
    assert row(database, job_id).phase == Phase.FAILED.value


def test_pods_gone_after_a_completed_launch_fail_the_attempt_after_a_grace(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    job_id = submit(database, "vanished", workers=2, gpu=1)
    loop.run_once()
    pods = pods_of(kube, job_id)
    assert len(pods) == 2
    for p in pods:
        kube.remove("pods", p["metadata"]["name"], NS)
    settle(loop, kube)
    loop.run_once()  # a lagging cache would look the same: not missing yet
    assert row(database, job_id).phase == Phase.SCHEDULED.value
    assert pods_of(kube, job_id) == []  # and not relaunched onto the old placement
    advance(loop, 31)
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.PENDING.value and r.restarts == 1
    assert "gone after the launch" in r.conditions[-1]["message"]
    advance(loop, 6)
    loop.run_once()
    assert row(database, job_id).phase == Phase.SCHEDULED.value
    assert len(pods_of(kube, job_id)) == 2


def test_long_not_ready_nodes_fail_their_workers() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    bound = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}

    def with_ready(status_: str, minutes: int) -> dict[str, object]:
        n = node("n1")
        since = (now - dt.timedelta(minutes=minutes)).isoformat()
        n["status"]["conditions"] = [
            {"type": "Ready", "status": status_, "lastTransitionTime": since}
        ]
        return n

    assert status.node_failure(bound, {"n1": with_ready("Unknown", 1)}, now, 300) is None
    assert "not been Ready" in (
        status.node_failure(bound, {"n1": with_ready("Unknown", 6)}, now, 300) or ""
    )
    assert status.node_failure(bound, {"n1": with_ready("True", 60)}, now, 300) is None
    assert status.node_failure(bound, {}, now, 300) == "node n1 is gone"


def test_a_reservation_without_a_uuid_in_time_is_replaced_and_its_shares_replaced(
    kube: FakeKube, make_backend: Make, database: Database
) -> None:
    kube.put("nodes", node("n1", gpus=1))
    backend = make_backend(
        retry_deadline_s=0.3,
        reconcile_interval_s=0,
        reservation_uuid_timeout_s=0.5,
        launch_workers=0,
    )
    loop = Loop(database, backend, clock=VirtualClock(), config=LoopConfig(interval_s=0.1))
    job_id = submit(database, "share", gpu=0.5)
    loop.run_once()
    res = kube.obj("pods", RES, NS)
    (share,) = pods_of(kube, job_id)
    assert not share["spec"].get("nodeName")  # waits for the UUID that never comes
    settle(loop, kube)
    eventually(lambda: backend.reservations.problems(backend.pod_cache.items()), timeout=10)
    (w,) = backend.workers()
    assert w.state is WorkerState.FAILED and w.retryable and "no GPU UUID" in w.message
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == Phase.PENDING.value and r.restarts == 1  # backoffLimit 0: not Failed
    assert kube.get("pods", RES, NS) is None  # went with its last share
    advance(loop, 6)
    settle(loop, kube)
    loop.run_once()
    assert row(database, job_id).phase == Phase.SCHEDULED.value
    fresh = kube.obj("pods", RES, NS)
    assert fresh["metadata"]["uid"] != res["metadata"]["uid"]  # a new reservation
    run_reserve(kube)
    backend.reconcile()
    eventually(lambda: all(p["spec"].get("nodeName") for p in pods_of(kube, job_id)))


def test_an_evicted_reservation_fails_its_shares(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    job_id = submit(database, "evictee", gpu=0.25)
    loop.run_once()
    run_reserve(kube)
    settle(loop, kube)
    backend_of(loop).reconcile()
    (share,) = pods_of(kube, job_id)
    set_phase(kube, share["metadata"]["name"], "Running")
    set_phase(kube, RES, "Failed", reason="Evicted", message="The node was low on memory.")
    settle(loop, kube)
    (w,) = backend_of(loop).workers()
    assert w.state is WorkerState.FAILED and w.retryable and w.still_running
    assert "Evicted" in w.message
    backend_of(loop).reconcile()
    assert any(e["reason"] == "ReservationFailed" for e in kube.objects("events", NS))
    loop.run_once()
    assert row(database, job_id).restarts == 1
    assert kube.get("pods", RES, NS) is None  # released with its last share
