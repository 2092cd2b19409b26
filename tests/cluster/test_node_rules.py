"""Issue 24 item 1 on a real kube-apiserver 1.37.2 (+ kwok): a pod's own scheduling
constraints hold as kube-scheduler would hold them. A foreign pod's nodeSelector, node
affinity and tolerations pick its node; a bound volume's node affinity too; what Shoal
cannot do (bind a WaitForFirstConsumer claim, allocate a ResourceClaim that is not there) leaves the
pod pending with the reason on its PodScheduled condition. A TrainingJob's nodeSelector
and tolerations place its workers and reach their pods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from .conftest import ControlPlane, Shoal, eventually
from .test_coexistence import gpu_pod, read
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
H100 = "NVIDIA-H100-80GB-HBM3"
# Binpack with ties to the lowest node index would pick "kw-a100" for anything: the
# node a pod's constraints point at sorts last.
A100_NODE, H100_NODE, TAINTED = "kw-a100", "kw-z-h100", "kw-t"


def node_of(cp: ControlPlane, pod: str) -> str | None:
    return read(cp, pod)["spec"].get("nodeName")


def unschedulable(cp: ControlPlane, pod: str) -> str:
    """The message of the pod's PodScheduled=False condition ('' while there is none)."""
    for c in read(cp, pod)["status"].get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def not_in(key: str, *values: str) -> Obj:
    term = {"matchExpressions": [{"key": key, "operator": "NotIn", "values": list(values)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}  # fmt: skip


def test_a_foreign_pods_selector_affinity_and_tolerations_pick_its_node(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node(A100_NODE, gpus=8)
    cluster.add_node(H100_NODE, gpus=8, product=H100)
    cluster.add_node(TAINTED, gpus=8)
    cluster.core.patch_node(
        TAINTED, {"spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}
    )
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: len(shoal.runtime.backend.nodes()) == 3, 60)
    create = cluster.core.create_namespaced_pod
    create("default", gpu_pod("sel", 1, schedulerName="shoal",
                              nodeSelector={"nvidia.com/gpu.product": H100}))  # fmt: skip
    away = not_in("kubernetes.io/hostname", A100_NODE, TAINTED)
    create("default", gpu_pod("aff", 1, schedulerName="shoal", affinity=away))
    # Only the tainted node matches: without a toleration it waits, with one it runs.
    only_t = {"kubernetes.io/hostname": TAINTED}
    create("default", gpu_pod("untol", 1, schedulerName="shoal", nodeSelector=only_t))
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    create("default", gpu_pod("tol", 1, schedulerName="shoal", nodeSelector=only_t,
                              tolerations=[toleration]))  # fmt: skip
    for pod, node in (("sel", H100_NODE), ("aff", H100_NODE), ("tol", TAINTED)):
        got = eventually(lambda pod=pod: node_of(cluster, pod), 60)
        assert got == node, (pod, got, shoal.diagnose())
    why = eventually(lambda: unschedulable(cluster, "untol"), 60)
    assert "1 node(s) had untolerated taint {dedicated=ml: NoSchedule}" in why, why
    assert "2 node(s) didn't match the node selector" in why, why
    assert node_of(cluster, "untol") is None
    assert not shoal.runtime.backend.errors(), shoal.runtime.backend.errors()


def storage(cp: ControlPlane) -> None:
    """A WaitForFirstConsumer class with a pending claim, and a local volume on the
    H100 node bound to a claim of its own."""
    storage_api = kubernetes.client.StorageV1Api(cp.api)
    storage_api.create_storage_class({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "wffc"}, "provisioner": "example.com/none",
        "volumeBindingMode": "WaitForFirstConsumer",
    })  # fmt: skip
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    cp.core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "late"}, "spec": {**claim, "storageClassName": "wffc"}})  # fmt: skip
    cp.core.create_persistent_volume({
        "metadata": {"name": "pv-h100"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual", "local": {"path": "/data"},
            "claimRef": {"namespace": "default", "name": "local"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [H100_NODE]}]}]}},
        },
    })  # fmt: skip
    cp.core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "local"},
        "spec": {**claim, "storageClassName": "manual", "volumeName": "pv-h100"}})  # fmt: skip


def unstorage(cp: ControlPlane) -> None:
    for args in (("pvc", "--all", "-n", "default"), ("pv", "pv-h100"), ("storageclass", "wffc")):
        cp.kubectl("delete", *args, "--wait=false", check=False)


def mounting(claim: str) -> Obj:
    return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}


def test_volumes_and_claims_place_or_hold_a_foreign_pod_with_the_reason(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node(A100_NODE, gpus=8)
    cluster.add_node(H100_NODE, gpus=8, product=H100)
    queue(cluster)
    unstorage(cluster)
    try:
        storage(cluster)
        phase = lambda: cluster.core.read_namespaced_persistent_volume_claim("local", "default")  # noqa: E731
        eventually(lambda: phase().status.phase == "Bound", 90)  # the PV controller binds it
        shoal = start_shoal(shoal_env)
        eventually(lambda: len(shoal.runtime.backend.nodes()) == 2, 60)
        create = cluster.core.create_namespaced_pod
        create("default", gpu_pod("local", 1, schedulerName="shoal", **mounting("local")))
        create("default", gpu_pod("late", 1, schedulerName="shoal", **mounting("late")))
        claim = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
        create("default", gpu_pod("dra", 0, schedulerName="shoal", resourceClaims=claim))
        got = eventually(lambda: node_of(cluster, "local"), 60)
        assert got == H100_NODE, (got, shoal.diagnose())
        why = eventually(lambda: unschedulable(cluster, "late"), 60)
        assert 'persistentvolumeclaim "late" waits for its first consumer' in why, why
        assert "WaitForFirstConsumer" in why, why
        why = eventually(lambda: unschedulable(cluster, "dra"), 60)
        assert 'ResourceClaim "gpu-claim" is not there' in why, why
        assert node_of(cluster, "late") is None and node_of(cluster, "dra") is None
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", "default", "--force", check=False)
        unstorage(cluster)


def test_a_trainingjobs_node_selector_and_tolerations_reach_its_workers(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node(A100_NODE, gpus=8)
    cluster.add_node(H100_NODE, gpus=8, product=H100)
    cluster.core.patch_node(
        H100_NODE, {"spec": {"taints": [{"key": "h100", "effect": "NoSchedule"}]}}
    )
    queue(cluster)
    shoal = start_shoal(shoal_env)
    toleration = {"key": "h100", "operator": "Exists", "effect": "NoSchedule"}
    trainingjob(
        cluster, "picky", nodeSelector={"nvidia.com/gpu.product": H100}, tolerations=[toleration]
    )
    job_id = eventually(lambda: cluster.tj("picky").get("status", {}).get("jobId"), 60)
    pods = running(cluster, job_id, 2, shoal)
    for p in pods:
        assert p["spec"]["nodeName"] == H100_NODE
        assert p["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": H100}
        assert toleration in p["spec"]["tolerations"]
    # Without the toleration the H100 node is out of reach: it waits, saying why.
    trainingjob(cluster, "blocked", nodeSelector={"nvidia.com/gpu.product": H100})
    reason = eventually(lambda: (cluster.tj("blocked").get("status") or {}).get("reason"), 60)
    assert reason == (
        "0/2 nodes are available: 1 node(s) didn't match the node selector, "
        "1 node(s) had untolerated taint {h100: NoSchedule}"
    ), reason
    assert not cluster.job_pods(str(cluster.tj("blocked")["status"]["jobId"]))
    # The CRD keeps a podAffinity (not pruned away unseen): the controller refuses it.
    trainingjob(cluster, "social", affinity={"podAffinity": {}})
    status = eventually(
        lambda: (s := cluster.tj("social").get("status") or {}).get("phase") == "Invalid" and s, 60
    )
    (valid,) = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert "podAffinity is not supported" in valid["message"], valid


def test_a_pod_naming_no_queue_or_an_unknown_one_is_told_why(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    """issue 35: a pod with `schedulerName: shoal` and no queue label was ignored in
    silence (no condition, no event): it gets PodScheduled=False with the reason, as a
    pod of a queue that does not exist does."""
    cluster.add_node(A100_NODE, gpus=8)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: len(shoal.runtime.backend.nodes()) == 1, 60)
    bare = gpu_pod("bare", 1, schedulerName="shoal")
    bare["metadata"]["labels"] = {}
    stray = gpu_pod("stray", 1, schedulerName="shoal")
    stray["metadata"]["labels"] = {"shoal.dev/queue": "nope"}
    for pod in (bare, stray):
        cluster.core.create_namespaced_pod("default", pod)
    why = eventually(lambda: unschedulable(cluster, "bare"), 60)
    assert why == "it names no queue: give the pod the label shoal.dev/queue=<queue>", why
    why = eventually(lambda: unschedulable(cluster, "stray"), 60)
    assert why.startswith("queue nope does not exist"), why
    events = cluster.core.list_namespaced_event("default").items
    assert any(
        e.reason == "FailedScheduling" and e.involved_object.name == "bare" for e in events
    ), [(e.reason, e.involved_object.name) for e in events]
    assert node_of(cluster, "bare") is None and node_of(cluster, "stray") is None
