"""One allocator per DRA device (issue 36): Shoal allocates DRA devices only on nodes of
its pool (label and NoSchedule taint `shoal.dev/pool=shoal`); a DRA node outside it
offers Shoal none of its GPUs and says why; and a device that another allocator wrote
into a claim while Shoal allocated it (read back from the API server after the write)
has Shoal's allocation released before the bind, the launch failing with why."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.draslices import allocated_claim

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.dra.draclaims import DraConflict, DraUnfit

from .conftest import NS, POOL, dra_node, eventually, job
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
D = "gpu.nvidia.com"


def offered(b: KubernetesBackend, name: str) -> Any:
    return next((n for n in b.nodes() if n.name == name), None)


def test_a_dra_node_outside_the_pool_offers_no_gpu_and_says_why(
    kube: FakeKube, make_backend: Make
) -> None:
    dra_node(kube, "n1", pool=False)
    b = make_backend()
    n1 = eventually(lambda: offered(b, "n1"))
    assert n1.gpu_count == 0 and "outside Shoal's node pool" in n1.withheld
    assert "node n1: its GPUs are DRA devices outside" in b.excluded_nodes()["n1"]
    assert {n.name: n.gpu_count for n in b.capacity()} == {"n1": 2}  # admission: it has 2
    # A placement made before the node left the pool: refused, nothing allocated.
    with pytest.raises(DraUnfit, match="node n1: its GPUs are DRA devices outside"):
        b.launch(job("late", gpu=1, gpus_of=lambda w: (0,)))
    assert not any(
        (c.get("status") or {}).get("allocation") for c in kube.objects("resourceclaims")
    )


def test_configured_to_allocate_outside_the_pool_it_does(
    kube: FakeKube, make_backend: Make
) -> None:
    dra_node(kube, "n1", pool=False)
    b = make_backend(dra_outside_pool=True)
    assert eventually(lambda: (n := offered(b, "n1")) and n.gpu_count == 2)
    assert "n1" not in b.excluded_nodes()


def test_on_a_pool_node_shoal_allocates_and_its_taint_is_no_bar(
    kube: FakeKube, make_backend: Make
) -> None:
    dra_node(kube, "n1", pool=True)
    b = make_backend()
    n1 = eventually(lambda: (n := offered(b, "n1")) and n.gpu_count == 2 and n)
    assert n1.taints == () and not n1.withheld  # its pool's taint is Shoal's own room
    b.launch(job("one", gpu=1, gpus_of=lambda w: (0,)))
    pod = kube.obj("pods", "one-a0-w0", NS)
    assert {"operator": "Equal", **POOL} in pod["spec"]["tolerations"]
    claim = kube.obj("resourceclaims", "one-a0-w0-gpu", NS)
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert kube.bindings.get((NS, "one-a0-w0"))


def test_a_device_another_allocator_took_in_flight_is_released_before_the_bind(
    kube: FakeKube, make_backend: Make
) -> None:
    dra_node(kube, "n1", pool=True, gpus=1)
    b = make_backend()
    eventually(lambda: (n := offered(b, "n1")) and n.gpu_count == 1)

    # Another allocator (kube-scheduler, on a misconfigured cluster) writes gpu-0 into a
    # claim of its own just as Shoal creates the worker's: Shoal's cache cannot show it
    # before Shoal writes its allocation; only the read-back can.
    def theirs(resource: str, verb: str, body: Obj) -> None:
        if resource == "resourceclaims" and verb == "create":
            kube.put("resourceclaims", allocated_claim("ks-0-gpu", [(D, "n1", "gpu-0")], "default"))

    kube.admission.append(theirs)
    with pytest.raises(DraConflict) as got:
        b.launch(job("one", gpu=1, gpus_of=lambda w: (0,)))
    said = str(got.value)
    assert "gpu.nvidia.com/n1/gpu-0 is also in ResourceClaim default/ks-0-gpu" in said
    assert f"released its ResourceClaim {NS}/one-a0-w0-gpu before the bind" in said
    mine = kube.obj("resourceclaims", "one-a0-w0-gpu", NS)
    assert not (mine.get("status") or {}).get("allocation"), json.dumps(mine)
    assert not (mine.get("status") or {}).get("reservedFor")
    assert kube.obj("resourceclaims", "ks-0-gpu", "default")["status"]["allocation"]
    assert not kube.bindings.get((NS, "one-a0-w0"))  # never bound
