"""DRA through the whole service (issue 28) on a real kube-apiserver 1.37.2 + kwok: the
test plays NVIDIA's DRA driver on a node with no device-plugin GPUs. A TrainingJob's
workers run on DRA GPUs and are charged to their queue in GPUs; a foreign pod's own
ResourceClaim is allocated by Shoal when a device satisfies its selector; one whose
selector no device satisfies waits, with the selector's reason on its PodScheduled
condition; a foreign pod asking `nvidia.com/gpu` goes to device-plugin nodes only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.draslices import gpu_class, gpu_slice

from .conftest import JOBS_NS, ControlPlane, Shoal, eventually
from .test_coexistence import gpu_pod, read
from .test_jobs import queue, trainingjob
from .test_node_rules import unschedulable

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
NODE, DRIVER = "kw-dra", "gpu.nvidia.com"
WORKERS = "app.kubernetes.io/component=worker"
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'


def claim(cp: ControlPlane, name: str, expression: str) -> None:
    exactly = {
        "deviceClassName": DRIVER,
        "count": 1,
        "selectors": [{"cel": {"expression": expression}}],
    }
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(body))


def claim_status(cp: ControlPlane, name: str) -> Obj:
    got = cp.kubectl("get", "resourceclaim", name, "-n", "default", "-o", "json").stdout
    return dict(json.loads(got).get("status") or {})


def claiming(name: str) -> Obj:
    return {"resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}


def test_jobs_and_foreign_claims_on_dra_gpus(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node(NODE, gpus=0, pool=True)  # Shoal allocates its DRA devices
    for obj in (gpu_class(), *gpu_slice(NODE, gpus=2)):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: [n.gpu_count for n in shoal.runtime.backend.nodes()] == [2], 60)

    trainingjob(cluster, "ddp", workers=1, gpu=1)
    workers = eventually(
        lambda: [p for p in cluster.pods(selector=WORKERS) if p["spec"].get("nodeName")]
    )
    (pod,) = workers
    mine = f"{pod['metadata']['name']}-gpu"
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == mine

    def allocated() -> object:
        got: Obj = cluster.custom.get_cluster_custom_object(
            "shoal.dev", "v1alpha1", "queues", "vision"
        )
        return (got.get("status") or {}).get("allocated")

    eventually(lambda: allocated() == 1, timeout=120)  # charged in GPUs, as placed

    # A foreign pod asking nvidia.com/gpu does not go to the DRA node (a GPU is free
    # there), only to a device-plugin node once there is one.
    create = cluster.core.create_namespaced_pod
    create("default", gpu_pod("plugin", 1, schedulerName="shoal"))
    why = eventually(lambda: unschedulable(cluster, "plugin"), 60)
    assert read(cluster, "plugin")["spec"].get("nodeName") is None, why
    cluster.add_node("kw-plugin", gpus=1)
    eventually(lambda: read(cluster, "plugin")["spec"].get("nodeName") == "kw-plugin", 60)

    claim(cluster, "h100", f'{PRODUCT} == "NVIDIA H100 80GB HBM3"')
    claim(cluster, "a100", f'{PRODUCT} == "NVIDIA A100-SXM4-80GB"')
    create("default", gpu_pod("fits", 0, schedulerName="shoal", **claiming("h100")))
    create("default", gpu_pod("nofit", 0, schedulerName="shoal", **claiming("a100")))
    create("default", gpu_pod("noclaim", 0, schedulerName="shoal", **claiming("missing")))
    eventually(lambda: read(cluster, "fits")["spec"].get("nodeName") == NODE, 60)
    st = claim_status(cluster, "h100")
    (result,) = st["allocation"]["devices"]["results"]
    assert result["driver"] == DRIVER and result["request"] == "gpu"
    held = json.loads(
        cluster.kubectl("get", "resourceclaim", mine, "-n", JOBS_NS, "-o", "json").stdout
    )["status"]["allocation"]["devices"]["results"]
    assert result["device"] not in {r["device"] for r in held}  # not the job's worker's
    assert st["reservedFor"][0]["uid"] == read(cluster, "fits")["metadata"]["uid"]

    why = eventually(lambda: unschedulable(cluster, "nofit"), 60)
    assert "A100-SXM4-80GB" in why and "is false for device" in why, why
    why = eventually(lambda: unschedulable(cluster, "noclaim"), 60)
    assert 'ResourceClaim "missing" is not there' in why, why
    assert read(cluster, "nofit")["spec"].get("nodeName") is None
    assert not claim_status(cluster, "a100").get("allocation")
