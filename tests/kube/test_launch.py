"""Launch and stop faults through the fake API server: what a real apiserver cannot
produce on demand (5xx mid-launch, a 429 with Retry-After) or cannot show (the count
of requests a stop makes). Everything else about launch, status and stop runs against a
real kube-apiserver and kwok in tests/cluster/test_launch.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.backends.kubernetes import ApiError, KubernetesBackend

from . import fakeapi
from .conftest import NS, eventually, job, node
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    for n in ("n1", "n2"):
        kube.put("nodes", node(n))
    return kube


def test_restart_mid_launch_creates_nothing_twice(cluster: FakeKube, make_backend: Make) -> None:
    first = make_backend(retry_deadline_s=0.3)
    req = job("gang", workers=4)
    # The third pod's creation keeps failing: the first backend gives up mid-launch.
    cluster.inject(50, 500, path="/namespaces/jobs/pods", method="POST", skip=2)
    with pytest.raises(ApiError):
        first.launch(req)
    first.close()
    assert len(cluster.objects("pods", NS)) == 2
    cluster.faults.clear()
    second = make_backend()
    second.launch(req)
    pods = cluster.objects("pods", NS)
    assert len(pods) == 4 and all(p["spec"].get("nodeName") == "n1" for p in pods)
    assert all(n == 1 for n in cluster.creates.values()), cluster.creates
    assert all(n == 1 for n in cluster.bindings.values()), cluster.bindings
    alloc = eventually(lambda: second.allocations().get("gang"))
    assert [p.worker for p in alloc.placements] == [0, 1, 2, 3]


def test_reconcile_binds_pods_a_crash_left_unbound(cluster: FakeKube, make_backend: Make) -> None:
    first = make_backend(retry_deadline_s=0.3)
    cluster.inject(50, 500, path="/binding")
    with pytest.raises(ApiError):
        first.launch(job("half", workers=2))
    first.close()
    cluster.faults.clear()
    make_backend()  # its reconcile step finishes the launch
    eventually(lambda: all(p["spec"].get("nodeName") for p in cluster.objects("pods", NS)))
    assert all(n == 1 for n in cluster.bindings.values())


def test_repeated_stops_of_a_draining_job_make_no_api_calls(
    cluster: FakeKube, make_backend: Make
) -> None:
    cluster.graceful_pod_deletes = True
    b = make_backend()
    b.launch(job("drain", workers=2))
    b.stop("drain", 30)
    eventually(
        lambda: all(p["metadata"].get("deletionTimestamp") for p in b.pod_cache.items()),
        timeout=10,
    )
    before = len(cluster.requests)
    for _ in range(5):  # the loop's orphan sweep, cycle after cycle
        b.stop("drain", 30)
    assert len(cluster.requests) == before
    b.launch(job("drain", workers=2, attempt=1))  # a new attempt: a stop acts again
    b.stop("drain", 30)
    assert len(cluster.requests) > before


def test_retry_after_is_honoured_and_calls_are_rate_limited(
    cluster: FakeKube, make_backend: Make
) -> None:
    from scheduler.backends.kubernetes.client.apierrors import TokenBucket

    b = make_backend()
    cluster.inject(1, 429, path="/api/v1/nodes/n1", retry_after="1")
    assert b.kube.get("nodes", "n1") is not None
    assert b.kube.waits[-1] == 1.0  # the server's Retry-After, not the 0.05 s backoff
    t = [0.0]
    slept: list[float] = []
    bucket = TokenBucket(10, 2, clock=lambda: t[0], sleep=slept.append)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    t[0] += 1.0  # refilled (at most the burst)
    assert bucket.take() == 0.0 and slept == [pytest.approx(0.1)]


def test_a_gang_goes_without_workloads_where_the_api_is_not_served(
    cluster: FakeKube, make_backend: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes 1.35 (or 1.37 without GenericWorkload) serves no Workload: a gang's
    launch and stop go on without one, and only the first launch asks."""
    for resource in ("workloads", "podgroups"):
        monkeypatch.delitem(fakeapi.RESOURCES, resource)
    b = make_backend()
    b.launch(job("ddp", workers=2))
    pods = cluster.objects("pods", NS)
    assert len(pods) == 2 and all(p["spec"].get("nodeName") == "n1" for p in pods)
    assert not any("schedulingGroup" in p["spec"] for p in pods)
    b.launch(job("ddp2", workers=2))
    asked = [r for r in cluster.requests if "workloads" in r[1]]
    assert len(asked) == 1, asked
    b.stop("ddp", 30)
    eventually(lambda: all(p["metadata"].get("deletionTimestamp") or p["metadata"]["name"]
                           .startswith("ddp2") for p in cluster.objects("pods", NS)))  # fmt: skip
