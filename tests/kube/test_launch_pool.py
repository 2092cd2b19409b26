"""Launches off the loop's thread (issue 39, `pods.launchpool`): the loop records a
placement and hands the launch to the backend's pool; until the loop settles it, its
workers count as pending (never missing, never launched twice); a refused launch on
the pool becomes the job's reason as one on the loop's thread does; a stop cancels a
launch still queued; parallel DRA launches never give one device to two claims."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.pods.launchpool import LaunchPool
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import Phase
from scheduler.store.db import Database
from scheduler.store.events import list_events

from .conftest import NS, dra_node, eventually, job, node
from .fakeapi import FakeKube
from .loopkit import cancel, of_job, pods_of, row, submit

Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]


@pytest.fixture
def pooled(kube: FakeKube, make_backend: Make, database: Database) -> Loop:
    """The loop over one node `n1` with 4 GPUs, launching on a pool of 4 threads."""
    kube.put("nodes", node("n1", gpus=4))
    backend = make_backend(retry_deadline_s=0.3, reconcile_interval_s=0, launch_workers=4)
    return Loop(database, backend, clock=VirtualClock(), config=LoopConfig(interval_s=0.1))


def kinds(database: Database, job_id: str) -> list[str]:
    with database.session() as session:
        return [e.kind for e in list_events(session=session, job_id=job_id)]


def hold_pod_creates(kube: FakeKube) -> threading.Event:
    """Pod creates wait until the returned event is set (a slow API server)."""
    release = threading.Event()

    def slow(resource: str, verb: str, body: Obj) -> None:
        if resource == "pods" and verb == "create":
            release.wait(30)

    kube.admission.append(slow)
    return release


def test_the_loop_does_not_wait_for_a_launch_and_its_workers_count_as_pending(
    kube: FakeKube, pooled: Loop, database: Database
) -> None:
    release = hold_pod_creates(kube)
    job_id = submit(database, "slow", workers=2)
    pooled.run_once()  # returns with the pod creates still held
    assert row(database, job_id).phase == Phase.SCHEDULED.value
    workers = [w for w in pooled.backend.workers() if w.job_id == job_id]
    assert [(w.worker, w.state, w.node) for w in workers] == [
        (0, base.WorkerState.PENDING, "n1"),
        (1, base.WorkerState.PENDING, "n1"),
    ]
    for _ in range(3):  # not missing, not launched again, not yet Launched
        pooled.run_once()
    assert "Launched" not in kinds(database, job_id)
    release.set()
    eventually(lambda: len(pods_of(kube, job_id)) == 2)
    eventually(lambda: all(p["spec"].get("nodeName") for p in pods_of(kube, job_id)))
    eventually(lambda: pooled.run_once() and "Launched" in kinds(database, job_id))
    assert all(n == 1 for n in kube.creates.values())  # nothing made twice
    assert kinds(database, job_id).count("Launched") == 1


def test_a_launch_refused_on_the_pool_is_the_jobs_reason_and_others_run(
    kube: FakeKube, pooled: Loop, database: Database
) -> None:
    big = submit(database, "big")
    small = submit(database, "small")
    kube.deny("pods", of_job(big), 403)
    pooled.run_once()

    def settled() -> bool:
        pooled.run_once()
        return row(database, big).phase == Phase.PENDING.value

    eventually(settled)
    r = row(database, big)
    assert r.pending_code == "LaunchFailed" and "403" in r.pending_message
    assert r.restarts == 0  # it never ran: no backoffLimit used up
    assert pods_of(kube, big) == []
    eventually(lambda: pods_of(kube, small) and pods_of(kube, small)[0]["spec"].get("nodeName"))
    assert row(database, small).phase in (Phase.SCHEDULED.value, Phase.RUNNING.value)


def test_a_cancel_drops_a_launch_still_queued(
    kube: FakeKube, make_backend: Make, database: Database
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    backend = make_backend(retry_deadline_s=0.3, reconcile_interval_s=0, launch_workers=1)
    loop = Loop(database, backend, clock=VirtualClock(), config=LoopConfig(interval_s=0.1))
    release = hold_pod_creates(kube)
    first = submit(database, "first")
    second = submit(database, "second")
    loop.run_once()  # first's launch holds the one thread; second's waits behind it
    cancel(database, second)
    stopping = threading.Thread(target=loop.run_once)
    stopping.start()
    eventually(lambda: row(database, second).phase == Phase.CANCELLED.value)
    release.set()
    stopping.join(30)
    eventually(lambda: pods_of(kube, first))
    loop.run_once()
    assert pods_of(kube, second) == []  # its launch never started
    assert not any(k[2].startswith("second") for k in kube.creates)


def test_a_lapsed_lease_stops_a_queued_launchs_writes() -> None:
    made: list[str] = []
    done = threading.Event()
    pool = LaunchPool(lambda r: made.append(r.job_id), threads=1, on_done=done.set)

    def lapsed(what: str) -> None:
        raise base.BackendError(f"{what} not sent: lease lapsed")

    pool.start(job("late"), lapsed)
    assert done.wait(10)
    [(request, error)] = pool.settled()
    assert request.job_id == "late" and "lease lapsed" in str(error) and made == []
    assert pool.settled() == [] and pool.pending() == []
    pool.close()


def test_parallel_dra_launches_never_give_one_device_twice(
    kube: FakeKube, make_backend: Make
) -> None:
    for n in ("n1", "n2"):
        dra_node(kube, n, pool=True, gpus=8)
    b = make_backend(launch_workers=8)
    eventually(lambda: sum(n.gpu_count for n in b.nodes()) == 16)
    # 16 one-GPU jobs, 8 a node, all placed at GPU index 0, launched 8 at a time: each
    # must get a device no other launch chose meanwhile.
    for i in range(16):
        on = f"n{1 + i // 8}"
        request = job(f"j{i:02d}", node_of=lambda w, on=on: on, gpus_of=lambda w: (0,))
        b.launch_async(request, lambda what: None)
    settled: list[tuple[base.LaunchRequest, Exception | None]] = []
    eventually(lambda: settled.extend(b.settled()) or len(settled) == 16, timeout=60)
    assert [e for _, e in settled if e is not None] == []
    claims = kube.objects("resourceclaims", NS)
    held = Counter(
        (r["pool"], r["device"])
        for c in claims
        for r in c["status"]["allocation"]["devices"]["results"]
    )
    assert len(claims) == 16 and set(held.values()) == {1}, held
    assert all(kube.bindings.get((NS, p["metadata"]["name"])) for p in kube.objects("pods", NS))
