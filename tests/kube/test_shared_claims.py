"""Shared claims (issue 36 item 4): a foreign pod naming a ResourceClaim that is allocated
already (another pod's) goes where the claim's `allocation.nodeSelector` selects, asks no
GPU of its own for it, and at the bind is appended to `status.reservedFor` beside the
other consumers, as kube-scheduler shares a claim. A full `reservedFor` (256) is a reason
to wait; an entry of a pod that is gone does not block (nor is it removed: that is the
resourceclaim controller's); a consumer that joins meanwhile is not dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.draslices import allocated_claim

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.dra.draclaims import DraUnfit
from scheduler.backends.kubernetes.view.status import ForeignPod
from scheduler.model import Requirement, WorkerPlacement

from .conftest import dra_node, eventually
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
D = "gpu.nvidia.com"


def ref(name: str, uid: str) -> Obj:
    return {"resource": "pods", "name": name, "uid": uid}


def shared_claim(*consumers: Obj) -> Obj:
    """`shared`, allocated gpu-0 of n1 and reserved for `consumers`."""
    obj = allocated_claim("shared", [(D, "n1", "gpu-0")], "default")
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    obj["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [term]}
    obj["status"]["reservedFor"] = list(consumers)
    return obj


def claimant(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"shoal.dev/queue": "q"}},
        "spec": {
            "schedulerName": "shoal",
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Pending"},
    }  # fmt: skip


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """Two DRA nodes of Shoal's pool, two GPUs each."""
    for n in ("n1", "n2"):
        dra_node(kube, n, pool=True, gpus=2)
    return kube


def waiting(b: KubernetesBackend, name: str) -> ForeignPod:
    return eventually(lambda: next((f for f in b.foreign_pods() if f.name == name), None), 20)


def reserved(kube: FakeKube) -> list[str]:
    claim = kube.obj("resourceclaims", "shared", "default")
    return [r["name"] for r in claim["status"].get("reservedFor") or []]


def test_a_pod_sharing_an_allocated_claim_goes_to_its_node_and_joins_it(
    cluster: FakeKube, make_backend: Make
) -> None:
    first = cluster.put("pods", {**claimant("first"), "spec": {
        **claimant("first")["spec"], "nodeName": "n1"}})  # fmt: skip
    # The first consumer, and one whose pod is gone (the controller's to remove).
    cluster.put("resourceclaims", shared_claim(
        ref("first", first["metadata"]["uid"]), ref("gone", "uid-gone")))  # fmt: skip
    cluster.put("pods", claimant("second"))
    b = make_backend()
    pod = waiting(b, "second")
    assert pod.gpu == 0  # the claim's device is the claim's, counted once
    (job,) = b.foreign_requests()
    assert job.gpu == 0 and job.nodes is not None and not job.nodes.blocked
    name_in = Requirement("metadata.name", "In", ("n1",), field=True)
    assert ((name_in,),) in job.nodes.required
    b.bind(pod, WorkerPlacement(0, "n1"))
    assert reserved(cluster) == ["first", "gone", "second"]
    assert cluster.obj("pods", "second", "default")["spec"]["nodeName"] == "n1"


def test_placed_on_another_node_it_is_not_bound(cluster: FakeKube, make_backend: Make) -> None:
    cluster.put("resourceclaims", shared_claim(ref("first", "uid-first")))
    cluster.put("pods", claimant("second"))
    b = make_backend()
    pod = waiting(b, "second")
    with pytest.raises(DraUnfit, match="allocated for other nodes than n2"):
        b.bind(pod, WorkerPlacement(0, "n2"))
    assert reserved(cluster) == ["first"]
    assert not cluster.obj("pods", "second", "default")["spec"].get("nodeName")


def test_a_full_claim_is_a_reason_to_wait(cluster: FakeKube, make_backend: Make) -> None:
    cluster.put("resourceclaims", shared_claim(*(ref(f"p{i}", f"u{i}") for i in range(256))))
    cluster.put("pods", claimant("second"))
    b = make_backend()
    waiting(b, "second")
    (job,) = b.foreign_requests()
    assert job.nodes is not None and "reserved for 256 pods" in job.nodes.blocked


def test_a_consumer_that_joins_meanwhile_is_kept(
    cluster: FakeKube, make_backend: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another consumer joins between Shoal's read and its write: the write carries the
    resourceVersion read, is refused (409), and Shoal reads the claim again."""
    cluster.put("resourceclaims", shared_claim(ref("first", "uid-first")))
    cluster.put("pods", claimant("second"))
    b = make_backend()
    pod = waiting(b, "second")
    dra = b._foreign.dra
    assert dra is not None
    patch, joined = dra.kube.patch, []

    def racing(resource: str, *args: Any, **kw: Any) -> Obj:
        if resource == "resourceclaims/status" and not joined:
            joined.append(True)
            cluster.put("resourceclaims", shared_claim(
                ref("first", "uid-first"), ref("third", "uid-third")))  # fmt: skip
        return patch(resource, *args, **kw)

    monkeypatch.setattr(dra.kube, "patch", racing)
    b.bind(pod, WorkerPlacement(0, "n1"))
    assert joined and reserved(cluster) == ["first", "third", "second"]


def test_two_pods_of_one_new_claim_end_on_one_node(cluster: FakeKube, make_backend: Make) -> None:
    """Neither is allocated yet and both are placed in one cycle, on different nodes: the
    first allocates the claim on its node; the second, placed elsewhere, is refused and
    waits; placed again it goes to the claim's node and joins it."""
    claim = allocated_claim("shared", [(D, "n1", "gpu-0")], "default")
    del claim["status"]
    cluster.put("resourceclaims", claim)
    for name in ("a", "b"):
        cluster.put("pods", claimant(name))
    b = make_backend()
    pod_a, pod_b = waiting(b, "a"), waiting(b, "b")
    assert pod_a.gpu == 1 and pod_b.gpu == 1  # each could be the one to allocate it
    b.bind(pod_a, WorkerPlacement(0, "n1", (0,)))
    with pytest.raises(DraUnfit):
        b.bind(pod_b, WorkerPlacement(0, "n2", (0,)))
    assert reserved(cluster) == ["a"]
    again = eventually(lambda: (f := waiting(b, "b")).gpu == 0 and f, 20)
    b.bind(again, WorkerPlacement(0, "n1"))
    assert reserved(cluster) == ["a", "b"]
