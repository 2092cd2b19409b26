"""The objects a DRA worker and a gang add (pure): the worker pod's claim reference,
its ResourceClaim and allocation, a gang's Workload and PodGroup; every one validated
strictly against Kubernetes 1.37's schemas."""

from __future__ import annotations

import kubernetes_validate
import pytest
from support.builders import launch_request

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.dra import claimobjects
from scheduler.backends.kubernetes.pods import gangs, workerpod

K8S = "1.37.0"
NS = "jobs"


def _pod(gpu: float, dra: base.Enforcement | None) -> dict:
    req = launch_request("train", gpu=gpu, gpus_of=lambda w: (0,) if gpu < 1 else (0, 1))
    pod = workerpod.worker_pod(req, req.placements[0], "train", NS, ["h0"], KubeConfig(), dra=dra)
    pod["metadata"]["uid"] = "0b0c3c8e-1111-4a4a-8c8c-222233334444"
    return pod


@pytest.mark.parametrize(
    ("gpu", "dra", "enforcement"),
    [
        (2, base.Enforcement.ADVISORY, None),
        (0.5, base.Enforcement.ADVISORY, "advisory"),
        (0.25, base.Enforcement.ENFORCED, "enforced"),
    ],
    ids=["whole", "share-by-capacity", "mig"],
)
def test_a_dra_worker_asks_its_claim_not_the_device_plugin(
    gpu: float, dra: base.Enforcement, enforcement: str | None
) -> None:
    pod = _pod(gpu, dra)
    kubernetes_validate.validate(pod, K8S, strict=True)
    res = pod["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in res["requests"] and "nvidia.com/gpu" not in res["limits"]
    assert res["claims"] == [{"name": "gpu"}]
    claim = names.claim_name("train-a0-w0")
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": claim}]
    ann = pod["metadata"]["annotations"]
    assert ann[names.DRA_CLAIM] == claim
    assert ann.get(names.ENFORCEMENT) == enforcement
    assert names.RESERVATION not in pod["metadata"]["labels"]  # no reservation pod
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the DRA driver exposes the devices
    if enforcement:
        assert env["SHOAL_GPU_ENFORCEMENT"]["value"] == enforcement


def test_the_device_plugin_worker_is_unchanged() -> None:
    pod = _pod(2, None)
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "2" and "claims" not in res
    assert "resourceClaims" not in pod["spec"]


def test_claim_and_allocation_are_what_the_api_server_takes() -> None:
    pod = _pod(0.5, base.Enforcement.ADVISORY)
    claim = claimobjects.claim(
        pod, device_class="gpu.nvidia.com", count=1, capacity={"memory": 40 << 30}, gpu_index=0
    )
    kubernetes_validate.validate(claim, K8S, strict=True)
    meta = claim["metadata"]
    assert meta["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert meta["finalizers"] == [claimobjects.FINALIZER]
    assert meta["annotations"][names.GPU_INDEX] == "0"
    exact = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exact["capacity"]["requests"] == {"memory": str(40 << 30)}
    claim["metadata"]["uid"] = "9a9a9a9a-1111-4a4a-8c8c-222233334444"
    body = claimobjects.allocation(
        claim, pod, "n1", [("gpu", ("gpu.nvidia.com", "n1", "gpu-0"), {"memory": 40 << 30})]
    )
    whole = {**claim, **body}
    kubernetes_validate.validate(whole, K8S, strict=True)
    (result,) = whole["status"]["allocation"]["devices"]["results"]
    assert result["shareID"] == claim["metadata"]["uid"]
    assert claimobjects.reserved_for(whole, pod)
    assert claimobjects.allocated_devices(whole) == [("gpu.nvidia.com", "n1", "gpu-0")]
    other = {"metadata": {"uid": "another"}}
    assert not claimobjects.reserved_for(whole, other)
    assert claimobjects.owner_uid(whole) == pod["metadata"]["uid"]
    assert claimobjects.owner_uid({"metadata": {}}) == ""


def test_a_gang_is_a_workload_and_a_pod_group_its_pods_name() -> None:
    req = launch_request("ddp", workers=3, node_of=lambda i: f"n{i}")
    assert gangs.is_gang(req)
    assert not gangs.is_gang(launch_request("solo"))
    wl, pg = gangs.workload(req, "ddp", NS), gangs.pod_group(req, "ddp", NS)
    for obj in (wl, pg):
        kubernetes_validate.validate(obj, K8S, strict=True)
        assert obj["metadata"]["name"] == names.group_name("ddp", 0)
    assert wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert pg["spec"]["workloadRef"] == {"workloadName": "ddp-a0", "templateName": "workers"}
    pod = workerpod.worker_pod(req, req.placements[0], "ddp", NS, ["h"] * 3, KubeConfig())
    pod = gangs.join(pod, "ddp-a0")
    kubernetes_validate.validate(pod, K8S, strict=True)
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "ddp-a0"}
