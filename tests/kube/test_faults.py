"""An API server that fails for a while: 500s, stalls past the client timeout, 410s.
Calls retry with bounded backoff, surface `Unavailable` when it lasts, and resume."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.backends.base import LaunchRequest
from scheduler.backends.kubernetes import KubernetesBackend, Unavailable

from .conftest import NS, eventually, job, node
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.put("nodes", node("n1"))
    return kube


def test_launch_rides_out_a_burst_of_500s(cluster: FakeKube, make_backend: Make) -> None:
    b = make_backend()
    cluster.inject(5, 500, method="POST")
    b.launch(job("burst", workers=2))
    assert len([p for p in cluster.objects("pods", NS) if p["spec"].get("nodeName")]) == 2
    assert all(n == 1 for n in cluster.creates.values())


def test_launch_rides_out_timeouts(cluster: FakeKube, make_backend: Make) -> None:
    # Two binds stall past the client's timeout. Timeout and retry deadline are generous
    # so that on a loaded machine an ordinary slow answer is retried too; passing depends
    # on the retries, never on the server answering within a short timeout.
    b = make_backend(request_timeout_s=3.0, retry_deadline_s=60.0)
    cluster.inject(2, stall_s=4.0, path="/binding")  # past the 3 s request timeout
    b.launch(job("slow", workers=1))
    pod = cluster.get("pods", "slow-a0-w0", NS)
    assert pod is not None and pod["spec"]["nodeName"] == "n1"
    # A stalled bind may still have been applied server-side: the retry's 409 is success.
    assert cluster.bindings[(NS, "slow-a0-w0")] == 1


def _launched(b: KubernetesBackend, request: LaunchRequest) -> bool:
    try:
        b.launch(request)
    except Unavailable:
        return False
    return True


def test_a_long_outage_surfaces_then_the_backend_resumes(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend(retry_deadline_s=0.5)
    cluster.inject(10_000, 503)
    with pytest.raises(Unavailable):
        b.launch(job("outage"))
    eventually(lambda: b.errors())  # the caches say it too
    cluster.faults.clear()
    # The loop retries a failed launch on its next cycle; do the same, since on a loaded
    # machine the first call after the outage may still hit the short test deadline.
    eventually(lambda: _launched(b, job("outage")), timeout=10)
    assert cluster.obj("pods", "outage-a0-w0", NS)["spec"]["nodeName"] == "n1"
    cluster.put("nodes", node("n2"))
    eventually(lambda: [n.name for n in b.nodes()] == ["n1", "n2"], timeout=8)
    eventually(lambda: not b.errors(), timeout=8)


def test_start_up_waits_out_a_short_outage(cluster: FakeKube, make_backend: Make) -> None:
    cluster.inject(4, 500, path="/api/v1/nodes", method="GET")
    b = make_backend()
    assert [n.name for n in b.nodes()] == ["n1"]
