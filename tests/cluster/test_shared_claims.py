"""Shared claims (issue 36 item 4), on a control plane of its own with kube-scheduler
running and the chart installed with its defaults: two pods naming one ResourceClaim (a
user's object, one GPU of a DRA driver's ResourceSlice) both run, as kube-scheduler
shares a claim. The second pod waited "ResourceClaim … is allocated already" before.

- Shoal allocates the claim for the first pod (a node of its pool); the second goes to
  the claim's node, and both are in `reservedFor`.
- kube-scheduler allocates it for its own pod (a DRA node outside Shoal's pool); a pod
  with `schedulerName: shoal` naming it goes to that node and joins it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.draslices import gpu_class, gpu_slice

from .conftest import ControlPlane, eventually
from .localshoal import Shoal
from .test_coexistence import gpu_pod, read
from .test_dra_service import claim_status, claiming
from .test_jobs import queue

pytestmark = pytest.mark.cluster
OURS, THEIRS, DRIVER = "kw-share-pool", "kw-share-kube", "gpu.nvidia.com"


@pytest.fixture
def cluster(beside: ControlPlane) -> Iterator[ControlPlane]:
    cp = beside
    cp.add_node(OURS, gpus=0, pool=True)  # Shoal allocates DRA devices here
    cp.add_node(THEIRS, gpus=0)  # kube-scheduler does
    for obj in (gpu_class(), *gpu_slice(OURS, gpus=2), *gpu_slice(THEIRS, gpus=2)):
        cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    queue(cp)
    yield cp
    cp.kubectl("delete", "pods", "--all", "-n", "default", "--force", check=False)
    cp.kubectl("delete", "resourceclaims", "--all", "-n", "default", check=False)


@pytest.fixture
def shoal(cluster: ControlPlane, shoal_beside: Shoal) -> Shoal:
    running = shoal_beside
    eventually(lambda: OURS in {n.name for n in running.runtime.backend.nodes()}, 60)
    return running


def one_gpu_claim(cp: ControlPlane, name: str) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1}}]}},
    }  # fmt: skip
    cp.kubectl("apply", "-f", "-", input=json.dumps(body))


def sharing(name: str, claim: str, scheduler: str | None = "shoal") -> dict[str, Any]:
    extra: dict[str, Any] = claiming(claim)
    if scheduler:
        extra["schedulerName"] = scheduler
    pod = gpu_pod(name, 0, **extra)
    resources = {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}
    pod["spec"]["containers"][0]["resources"] = resources
    return pod


def node_of(cp: ControlPlane, pod: str) -> str | None:
    return read(cp, pod)["spec"].get("nodeName")


def consumers(cp: ControlPlane, claim: str) -> set[str]:
    return {r["uid"] for r in claim_status(cp, claim).get("reservedFor") or []}


def test_a_claim_shoal_allocated_is_shared_by_a_second_pod(
    cluster: ControlPlane, shoal: Shoal
) -> None:
    one_gpu_claim(cluster, "shared")
    cluster.core.create_namespaced_pod("default", sharing("first", "shared"))
    eventually(lambda: node_of(cluster, "first") == OURS, 90, every=1.0)
    assert claim_status(cluster, "shared")["allocation"]
    cluster.core.create_namespaced_pod("default", sharing("second", "shared"))
    eventually(lambda: node_of(cluster, "second") == OURS, 90, every=1.0)
    uids = {read(cluster, p)["metadata"]["uid"] for p in ("first", "second")}
    assert eventually(lambda: consumers(cluster, "shared") == uids, 30)
    (result,) = claim_status(cluster, "shared")["allocation"]["devices"]["results"]
    assert result["pool"] == OURS


def test_a_claim_kube_scheduler_allocated_is_shared_by_a_pod_of_shoal(
    cluster: ControlPlane, shoal: Shoal
) -> None:
    one_gpu_claim(cluster, "theirs")
    cluster.core.create_namespaced_pod("default", sharing("kube", "theirs", scheduler=None))
    eventually(lambda: node_of(cluster, "kube") == THEIRS, 90, every=1.0)
    cluster.core.create_namespaced_pod("default", sharing("joins", "theirs"))
    eventually(lambda: node_of(cluster, "joins") == THEIRS, 90, every=1.0)
    uids = {read(cluster, p)["metadata"]["uid"] for p in ("kube", "joins")}
    assert eventually(lambda: consumers(cluster, "theirs") == uids, 30)
