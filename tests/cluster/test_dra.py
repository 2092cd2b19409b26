"""GPUs a DRA driver publishes (resource.k8s.io/v1, Kubernetes 1.37), on a real
kube-apiserver with kube-controller-manager's resourceclaim controller: the test plays
the driver (DeviceClasses, and ResourceSlices for kwok nodes with whole GPUs, GPUs shared
by capacity and MIG-partitionable GPUs) and checks what Shoal counts and allocates, that
fractions need no reservation pod, that a claim is deallocated once its pod is gone and
not before, and that a gang gets its Workload and PodGroup."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.builders import launch_request as job
from support.draslices import gpu_class, gpu_slice

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.dra.draclaims import DraUnfit

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, eventually

pytestmark = pytest.mark.cluster
Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"


def dra_node(cp: ControlPlane, make: Make, gpus: int, **kw: Any) -> KubernetesBackend:
    """Node n1 of Shoal's pool with no device-plugin GPUs and `gpus` published by the
    driver; a backend that sees them."""
    cp.add_node("n1", gpus=0, pool=True)
    publish(cp, "n1", gpus=gpus, **kw)
    b = make()
    eventually(lambda: node_of(b, "n1").gpu_count == gpus)
    return b


def publish(cp: ControlPlane, node: str, **kw: Any) -> None:
    """Play the DRA driver on `node`: its ResourceSlices (the classes once)."""
    for cls in (gpu_class(), gpu_class("mig.nvidia.com", type="mig")):
        cp.kubectl("apply", "-f", "-", input=_json(cls))
    for s in gpu_slice(node, **kw):
        cp.kubectl("apply", "-f", "-", input=_json(s))


def _json(obj: Obj) -> str:
    return json.dumps(obj)


def claims(cp: ControlPlane) -> dict[str, Obj]:
    got = cp.kubectl("get", "resourceclaims", "-n", JOBS_NS, "-o", "json").stdout
    return {c["metadata"]["name"]: c for c in json.loads(got)["items"]}


def results(claim: Obj) -> list[Obj]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def node_of(b: KubernetesBackend, name: str) -> Any:
    return next(n for n in b.nodes() if n.name == name)


def test_whole_gpus_are_counted_from_dra_alone_and_allocated_in_claims(
    cluster: ControlPlane, make_backend: Make
) -> None:
    cluster.add_node("n1", gpus=8, pool=True)  # the device plugin's count, which DRA replaces
    publish(cluster, "n1", gpus=4)
    b = make_backend()
    n1 = eventually(lambda: node_of(b, "n1") if node_of(b, "n1").gpu_count == 4 else None)
    assert n1.gpu_model.startswith("NVIDIA") and n1.gpu_memory_mib == 80 * 1024
    b.launch(job("wide", gpu=2, gpus_of=lambda w: (0, 1)))
    pod = eventually(lambda: next(p for p in cluster.job_pods("wide") if p["spec"].get("nodeName")))
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
    claim = claims(cluster)["wide-a0-w0-gpu"]
    got = results(claim)
    assert len(got) == 2 and len({r["device"] for r in got}) == 2
    assert {r["driver"] for r in got} == {DRIVER}
    (ref,) = claim["status"]["reservedFor"]
    assert (ref["name"], ref["uid"]) == (pod["metadata"]["name"], pod["metadata"]["uid"])
    # Its own claims are its placements', not other schedulers': n1 still offers 4.
    assert node_of(b, "n1").gpu_count == 4


def test_another_schedulers_claim_takes_its_gpu_away(
    cluster: ControlPlane, make_backend: Make
) -> None:
    b = dra_node(cluster, make_backend, 2)
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "theirs", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": DRIVER, "count": 1}}]
            }
        },
    }
    cluster.kubectl("apply", "-f", "-", input=_json(foreign))
    status = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "g", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
                }
            }
        }
    }
    cluster.kubectl(
        "patch", "resourceclaim", "theirs", "-n", "default", "--subresource=status",
        "--type=merge", "-p", _json(status),
    )  # fmt: skip
    eventually(lambda: node_of(b, "n1").gpu_count == 1)
    b.launch(job("one", gpu=1, gpus_of=lambda w: (0,)))
    pod = eventually(lambda: next(p for p in cluster.job_pods("one") if p["spec"].get("nodeName")))
    (r,) = results(claims(cluster)[f"{pod['metadata']['name']}-gpu"])
    assert r["device"] == "gpu-1"  # not the one their claim holds
    with pytest.raises(DraUnfit, match="n1"):  # both taken now: the job's reason
        b.launch(job("late", gpu=1, gpus_of=lambda w: (0,)))


def test_fractions_share_a_device_by_capacity_without_reservation_pods(
    cluster: ControlPlane, make_backend: Make
) -> None:
    b = dra_node(cluster, make_backend, 2, consumable=True)
    assert node_of(b, "n1").no_sharing == ""
    for name in ("half-a", "half-b"):
        b.launch(job(name, gpu=0.5, gpus_of=lambda w: (0,)))
    bound = eventually(
        lambda: [p for n in ("half-a", "half-b") for p in cluster.job_pods(n)
                 if p["spec"].get("nodeName")] or None
    )  # fmt: skip
    eventually(lambda: len(bound) == 2 or None)
    assert cluster.pods(RESERVATIONS_NS) == []  # no reservation pod anywhere
    got = [results(c)[0] for c in claims(cluster).values()]
    assert len({r["device"] for r in got}) == 1  # both on GPU index 0's device
    assert all(int(r["consumedCapacity"]["memory"]) >= 40 << 30 for r in got)
    assert len({r["shareID"] for r in got}) == 2


def test_a_fraction_of_a_partitionable_gpu_gets_a_mig_slice(
    cluster: ControlPlane, make_backend: Make
) -> None:
    b = dra_node(cluster, make_backend, 1, mig=True)
    assert str(node_of(b, "n1").enforcement) == "enforced"
    b.launch(job("small", gpu=0.25, gpus_of=lambda w: (0,)))
    eventually(lambda: any(p["spec"].get("nodeName") for p in cluster.job_pods("small")))
    (claim,) = claims(cluster).values()
    (r,) = results(claim)
    assert r["device"] != "gpu-0"  # a slice, not the whole GPU
    exact = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exact["deviceClassName"] == "mig.nvidia.com"


def test_a_claim_is_deallocated_when_its_pod_is_gone_not_before(
    cluster: ControlPlane, make_backend: Make
) -> None:
    b = dra_node(cluster, make_backend, 1)
    b.launch(job("short", gpu=1, gpus_of=lambda w: (0,)))
    pod = eventually(
        lambda: next(p for p in cluster.job_pods("short") if p["spec"].get("nodeName"))
    )
    name = f"{pod['metadata']['name']}-gpu"
    # A finalizer keeps the pod after its deletion, as a kubelet still stopping it would.
    cluster.core.patch_namespaced_pod(
        pod["metadata"]["name"], JOBS_NS, {"metadata": {"finalizers": ["shoal.test/hold"]}}
    )
    b.stop("short", 30)
    eventually(lambda: cluster.job_pods("short")[0]["metadata"].get("deletionTimestamp"))
    assert results(claims(cluster)[name])  # still allocated while the pod exists
    cluster.core.patch_namespaced_pod(
        pod["metadata"]["name"], JOBS_NS, {"metadata": {"finalizers": None}}
    )
    eventually(lambda: name not in claims(cluster), timeout=120)


def test_a_gang_has_a_workload_and_a_pod_group(cluster: ControlPlane, make_backend: Make) -> None:
    cluster.add_node("n1", gpus=8)
    b = make_backend()
    b.launch(job("ddp", workers=3, gpu=1, gpus_of=lambda w: (w,)))
    for kind in ("workloads", "podgroups"):
        got = cluster.kubectl("get", kind, "-n", JOBS_NS, "-o", "json").stdout
        (obj,) = json.loads(got)["items"]
        assert obj["metadata"]["name"] == "ddp-a0"
        assert obj["spec"]["schedulingPolicy" if kind == "podgroups" else "podGroupTemplates"]
    for p in cluster.job_pods("ddp"):
        assert p["spec"]["schedulingGroup"] == {"podGroupName": "ddp-a0"}
    b.stop("ddp", 30)
    eventually(
        lambda: (
            not json.loads(cluster.kubectl("get", "podgroups", "-n", JOBS_NS, "-o", "json").stdout)[
                "items"
            ]
        )
    )
