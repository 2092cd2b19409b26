"""Foreign pods' bindings (the scale path, issue 9): one call per pod carrying the
annotations, on a pool off the loop's thread; a pod whose binding is in flight is never
pending twice and its GPUs stay taken; a refused binding comes back to the loop."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.model import WorkerPlacement

from .conftest import eventually, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
JOB = "pod:default/nb"
PATH = "/api/v1/namespaces/default/pods/nb"


def waiting(kube: FakeKube, name: str = "nb", gpus: str = "1") -> None:
    kube.put(
        "pods",
        pod(
            name,
            phase="Pending",
            scheduler="shoal",
            labels={"shoal.dev/queue": "research"},
            requests={"nvidia.com/gpu": gpus},
        ),
    )


def test_the_binding_carries_the_annotations_in_one_call(
    kube: FakeKube, make_backend: Make
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    waiting(kube)
    b = make_backend()
    eventually(b.foreign_pods, timeout=20)
    b.bind_foreign(JOB, WorkerPlacement(0, "n1", (2,), 1.0))
    bound = eventually(lambda: kube.obj("pods", "nb", "default")["spec"].get("nodeName"), 20)
    assert bound == "n1"
    ann = kube.obj("pods", "nb", "default")["metadata"]["annotations"]
    assert (ann["shoal.dev/job-id"], ann["shoal.dev/node"], ann["shoal.dev/gpus"]) == (
        JOB,
        "n1",
        "2",
    )
    calls = [r for r in kube.requests if r[1].startswith(PATH)]
    assert calls == [("POST", f"{PATH}/binding")]  # no PATCH before it
    # Adopted: running in its queue at that GPU, no longer pending.
    ran = eventually(lambda: b.foreign_running() and not b.foreign_pods() and b.foreign_running())
    assert [(r.job.id, r.job.queue, r.placements) for r in ran] == [
        (JOB, "research", (WorkerPlacement(0, "n1", (2,), 1.0),))
    ]


def test_a_pod_being_bound_is_running_not_pending(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1", gpus=4))
    waiting(kube)
    b = make_backend(request_timeout_s=30.0)
    eventually(b.foreign_pods, timeout=20)
    kube.inject(1, stall_s=2.0, path=f"{PATH}/binding", method="POST")
    at = WorkerPlacement(0, "n1", (0,), 1.0)
    b.bind_foreign(JOB, at)  # returns at once: the binding runs on the pool
    # Meanwhile the next cycle neither sees it waiting nor gives its GPU to another pod.
    assert b.foreign_pods() == []
    assert [(r.job.id, r.placements) for r in b.foreign_running()] == [(JOB, (at,))]
    b.bind_foreign(JOB, WorkerPlacement(0, "n1", (1,), 1.0))  # placed again: ignored
    eventually(lambda: kube.obj("pods", "nb", "default")["spec"].get("nodeName"), 20)
    ran = eventually(
        lambda: [r for r in b.foreign_running() if r.placements[0].node == "n1"], timeout=20
    )
    assert [(r.job.id, r.placements) for r in ran] == [(JOB, (at,))]
    assert kube.bindings[("default", "nb")] == 1


def test_a_refused_binding_comes_back_to_the_loop(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1", gpus=4))
    waiting(kube)
    woken = threading.Event()
    b = make_backend()
    b.on_change = woken.set  # the loop's wake
    eventually(b.foreign_pods, timeout=20)
    rule = kube.deny("pods", lambda _: True, code=403, verb="bind")
    at = WorkerPlacement(0, "n1", (0,), 1.0)
    b.bind_foreign(JOB, at)
    # The pod waits again and the loop is woken; placing it again raises the refusal
    # (the loop's per-job backoff takes it from there).
    eventually(b.foreign_pods, timeout=20)
    assert woken.wait(20)
    assert b.foreign_running() == []
    with pytest.raises(ApiError) as refused:
        b.bind_foreign(JOB, at)
    assert refused.value.status == 403
    kube.admission.remove(rule)
    b.bind_foreign(JOB, at)  # after the backoff: tried again, and bound
    eventually(lambda: kube.obj("pods", "nb", "default")["spec"].get("nodeName"), 20)


def test_a_new_waiting_pod_wakes_the_loop(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1", gpus=4))
    b = make_backend()
    woken = threading.Event()
    b.index.on_new_work = woken.set
    waiting(kube, "late")
    assert woken.wait(20)
    assert [f.name for f in b.foreign_pods()] == ["late"]


def test_foreign_usage_follows_pods_as_they_come_and_go(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1", gpus=8))
    kube.put("pods", pod("infer", node_name="n1", requests={"nvidia.com/gpu": "3"}))
    b = make_backend()
    eventually(lambda: b.nodes()[0].gpu_count == 5, timeout=20)
    kube.update("pods", "infer", "default", {"status": {"phase": "Succeeded"}})
    eventually(lambda: b.nodes()[0].gpu_count == 8, timeout=20)
    kube.put("pods", pod("train", node_name="n1", requests={"nvidia.com/gpu": "8"}))
    eventually(lambda: b.nodes()[0].gpu_count == 0, timeout=20)
    kube.remove("pods", "train", "default")
    eventually(lambda: b.nodes()[0].gpu_count == 8, timeout=20)


def test_concurrent_bindings_keep_their_connections(
    kube: FakeKube, make_backend: Make, caplog: pytest.LogCaptureFixture
) -> None:
    # Every binding thread in flight at once (each binding stalls) must find room in
    # the client's connection pool: a connection dropped after one call means a new
    # TCP (and TLS) handshake for each bind.
    workers = 24
    kube.put("nodes", node("n1", gpus=workers))
    for i in range(workers):
        waiting(kube, f"nb{i}")
    b = make_backend(bind_workers=workers, request_timeout_s=30.0, qps=0)
    eventually(lambda: len(b.foreign_pods()) == workers, timeout=20)
    kube.inject(workers, stall_s=1.0, path="/binding", method="POST")
    caplog.set_level("WARNING", logger="urllib3.connectionpool")
    for i in range(workers):
        b.bind_foreign(f"pod:default/nb{i}", WorkerPlacement(0, "n1", (i,), 1.0))
    eventually(lambda: len(kube.bindings) == workers, timeout=30)
    eventually(lambda: len(b.foreign_running()) == workers and not b.foreign_pods(), timeout=30)
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
