"""Launch, status and stop of whole-GPU and CPU jobs on a real kube-apiserver (kwok nodes
playing the kubelets): the KubernetesBackend alone, with the chart's ServiceAccount token,
so every call goes through the chart's RBAC, Pod Security `baseline` and the real
binding subresource. (Moved from tests/kube/test_launch.py; what needs injected faults
stays there, against the fake server.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.builders import launch_request as job

from scheduler.backends.base import WorkerState
from scheduler.backends.kubernetes import ApiError, KubernetesBackend
from scheduler.spec import Origin

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, eventually

pytestmark = pytest.mark.cluster
Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
SVC = f"{JOBS_NS}.svc"


@pytest.fixture
def nodes(cluster: ControlPlane) -> ControlPlane:
    for n in ("n1", "n2"):
        cluster.add_node(n)
    return cluster


def env_of(pod: Obj) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]
    }


def pods_of(cp: ControlPlane, name: str) -> list[Obj]:
    return sorted(
        cp.pods(JOBS_NS, f"shoal.dev/job={name}"), key=lambda p: str(p["metadata"]["name"])
    )


def services(cp: ControlPlane) -> list[str]:
    got = cp.core.list_namespaced_service(
        JOBS_NS, label_selector="app.kubernetes.io/managed-by=shoal"
    )
    return [s.metadata.name for s in got.items]


def configmaps(cp: ControlPlane) -> list[Obj]:
    got = cp.core.list_namespaced_config_map(
        JOBS_NS, label_selector="app.kubernetes.io/managed-by=shoal"
    )
    return [cp.api.sanitize_for_serialization(c) for c in got.items]


def event_reasons(cp: ControlPlane) -> set[str]:
    return {e.reason for e in cp.core.list_namespaced_event(JOBS_NS).items}


def owner_cr(cp: ControlPlane, name: str) -> Origin:
    """A TrainingJob to own the pods (a real object: the garbage collector deletes
    dependents whose owner does not exist)."""
    spec = {"queue": "vision", "image": "ghcr.io/x/train:1", "workers": 4, "gpu": 2}
    cr = cp.create_tj(name, spec)
    return Origin("TrainingJob", JOBS_NS, name, cr["metadata"]["uid"])


def test_pytorch_job_gets_a_service_and_four_bound_pods(
    nodes: ControlPlane, make_backend: Make
) -> None:
    owner = owner_cr(nodes, "resnet")
    req = job(
        "resnet",
        workers=4,
        gpu=2,
        node_of=lambda i: "n1" if i < 2 else "n2",
        gpus_of=lambda i: (2 * (i % 2), 2 * (i % 2) + 1),
        owner=owner,
    )
    make_backend().launch(req)
    svc = nodes.api.sanitize_for_serialization(
        nodes.core.read_namespaced_service("resnet", JOBS_NS)
    )
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    pods = pods_of(nodes, "resnet")
    assert [p["metadata"]["name"] for p in pods] == [f"resnet-a0-w{i}" for i in range(4)]
    master = f"resnet-a0-w0.resnet.{SVC}"
    for i, p in enumerate(pods):
        spec, meta = p["spec"], p["metadata"]
        assert spec["nodeName"] == ("n1" if i < 2 else "n2")  # bound through pods/binding
        assert spec["schedulerName"] == "shoal"
        assert spec["automountServiceAccountToken"] is False  # no default-SA token
        assert (spec["hostname"], spec["subdomain"]) == (meta["name"], "resnet")
        assert meta["labels"] == {
            "app.kubernetes.io/name": "shoal",
            "app.kubernetes.io/instance": "resnet",
            "app.kubernetes.io/component": "worker",
            "app.kubernetes.io/managed-by": "shoal",
            "shoal.dev/job": "resnet",
            "shoal.dev/queue": "vision",
            "shoal.dev/attempt": "0",
            "shoal.dev/worker-index": str(i),
        }
        (ref,) = meta["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("TrainingJob", owner.uid)
        assert meta["annotations"]["shoal.dev/gpus"] == ("0,1" if i % 2 == 0 else "2,3")
        c = spec["containers"][0]
        assert c["resources"]["requests"] == {
            "cpu": "2",
            "memory": "8Gi",
            "nvidia.com/gpu": "2",
        }  # the apiserver's canonical form of 2000m / 8192Mi
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        env = env_of(p)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master, "29500")
        assert (env["RANK"], env["PET_NODE_RANK"], env["PET_NNODES"]) == (str(i), str(i), "4")
        # Two GPUs a worker: torchrun runs two processes on each (Kubeflow's nprocPerNode).
        assert (env["PET_NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("2", "8")
        assert env["USER_VAR"] == "1"
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it
        assert "SHOAL_TRAININGJOB_UID" not in env
    # kwok starts what was bound, as a kubelet would.
    eventually(
        lambda: all(p["status"].get("phase") == "Running" for p in pods_of(nodes, "resnet")),
        timeout=90,
    )
    eventually(lambda: {"Scheduled", "Launched"} <= event_reasons(nodes), timeout=60)


def test_repeating_a_launch_creates_and_binds_nothing_more(
    nodes: ControlPlane, make_backend: Make
) -> None:
    b = make_backend()
    req = job("again", workers=2)
    b.launch(req)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(nodes, "again")}
    svc_uid = nodes.core.read_namespaced_service("again", JOBS_NS).metadata.uid
    b.launch(req)  # a second bind of a bound pod would be refused (409) by the apiserver
    after = pods_of(nodes, "again")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == before
    assert all(p["spec"]["nodeName"] == "n1" for p in after)
    assert nodes.core.read_namespaced_service("again", JOBS_NS).metadata.uid == svc_uid


def test_tf_config_lists_every_worker(nodes: ControlPlane, make_backend: Make) -> None:
    make_backend().launch(job("tfjob", workers=3, framework="tensorflow", gpu=None))
    pods = pods_of(nodes, "tfjob")
    assert len(pods) == 3
    for i, p in enumerate(pods):
        tf = json.loads(env_of(p)["TF_CONFIG"])
        assert tf["cluster"]["worker"] == [
            f"tfjob-a0-w{w}.tfjob.{SVC}:{29501 + w}" for w in range(3)
        ]
        assert tf["task"] == {"type": "worker", "index": i}
        assert env_of(p)["NVIDIA_VISIBLE_DEVICES"] == "void"  # CPU-only sees no GPU
        assert "nvidia.com/gpu" not in p["spec"]["containers"][0]["resources"]["requests"]


def test_mpi_hostfile_is_a_mounted_config_map(nodes: ControlPlane, make_backend: Make) -> None:
    make_backend().launch(job("mpi", workers=2, framework="mpi"))
    (cm,) = configmaps(nodes)
    assert cm["data"]["hostfile"] == f"mpi-a0-w0.mpi.{SVC} slots=1\nmpi-a0-w1.mpi.{SVC} slots=1\n"
    p = pods_of(nodes, "mpi")[0]
    mounts = {m["mountPath"]: m for m in p["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/etc/shoal/hostfile"]["subPath"] == "hostfile"
    assert env_of(p)["OMPI_MCA_orte_default_hostfile"] == "/etc/shoal/hostfile"


def test_failed_worker_reports_its_exit_code(nodes: ControlPlane, make_backend: Make) -> None:
    b = make_backend()
    b.launch(job("crash", workers=2))
    eventually(lambda: [w.state for w in b.workers()] == [WorkerState.RUNNING] * 2, timeout=90)
    crashed = next(p for p in pods_of(nodes, "crash") if p["metadata"]["name"] == "crash-a0-w1")
    nodes.finish(crashed, "Failed")  # kwok: exit code 1, reason Error
    w = eventually(lambda: [w for w in b.workers() if w.state is WorkerState.FAILED], timeout=90)
    assert (w[0].worker, w[0].exit_code, w[0].message, w[0].node) == (1, 1, "Error", "n1")
    assert sorted(b.workers(), key=lambda x: x.worker)[0].state is WorkerState.RUNNING
    eventually(lambda: "WorkerFailed" in event_reasons(nodes), timeout=60)


def test_stop_deletes_pods_with_grace_and_the_service(
    nodes: ControlPlane, make_backend: Make
) -> None:
    b = make_backend()
    b.launch(job("victim", workers=2, framework="mpi"))
    for p in pods_of(nodes, "victim"):  # kwok keeps a deleted pod Terminating its grace
        nodes.core.patch_namespaced_pod(
            p["metadata"]["name"],
            JOBS_NS,
            {"metadata": {"annotations": {"shoal.test/graceful": "true"}}},
        )
    b.stop("victim", 45, reason="Preempted")
    for p in pods_of(nodes, "victim"):  # Terminating with the grace it was given
        assert p["metadata"]["deletionTimestamp"], p["metadata"]
        assert p["metadata"]["deletionGracePeriodSeconds"] == 45
    eventually(lambda: services(nodes) == [] and configmaps(nodes) == [], timeout=60)
    eventually(lambda: "Preempted" in event_reasons(nodes), timeout=60)
    b.stop("victim", 45)  # idempotent
    assert all(p["metadata"]["deletionGracePeriodSeconds"] == 45 for p in pods_of(nodes, "victim"))


def test_a_pod_that_is_not_shoals_is_not_taken_over(
    nodes: ControlPlane, make_backend: Make
) -> None:
    nodes.core.create_namespaced_pod(
        JOBS_NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "taken-a0-w0"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        },
    )
    with pytest.raises(ApiError, match="does not belong"):
        make_backend().launch(job("taken"))
    (p,) = nodes.pods(JOBS_NS, "")
    assert p["spec"].get("nodeName") is None and "shoal.dev/job" not in (
        p["metadata"].get("labels") or {}
    )


def test_allocations_are_rebuilt_from_pods(nodes: ControlPlane, make_backend: Make) -> None:
    make_backend().launch(job("old", workers=2, gpu=2, node_of=lambda i: f"n{i + 1}"))
    fresh = make_backend()
    alloc = eventually(lambda: fresh.allocations().get("old"), timeout=60)
    assert alloc.attempt == 0 and alloc.queue == "vision"
    assert [(p.node, p.gpus, p.fraction) for p in alloc.placements] == [
        ("n1", (0, 1), 1.0),
        ("n2", (2, 3), 1.0),
    ]
    # Shoal's pods are not "foreign": both nodes keep all 8 GPUs. Waited for, since a kwok
    # node can drop out of Ready for a moment on a loaded machine.
    eventually(lambda: [n.gpu_count for n in fresh.nodes()] == [8, 8], timeout=90)


def test_finished_jobs_objects_go_after_the_ttl(nodes: ControlPlane, make_backend: Make) -> None:
    b = make_backend(finished_ttl_s=0.3)
    b.launch(job("short", workers=2))
    b.launch(job("long", workers=1))
    eventually(
        lambda: all(p["status"].get("phase") == "Running" for p in pods_of(nodes, "short")),
        timeout=90,
    )
    for p in pods_of(nodes, "short"):
        nodes.finish(p)  # kwok: Succeeded, exit 0
    eventually(lambda: pods_of(nodes, "short") == [], timeout=90)
    assert [p["metadata"]["name"] for p in pods_of(nodes, "long")] == ["long-a0-w0"]
    eventually(lambda: services(nodes) == ["long"], timeout=90)


def test_a_fraction_on_an_mps_node_is_one_bound_replica(
    cluster: ControlPlane, make_backend: Make
) -> None:
    """The device plugin shares each GPU as 4 MPS replicas: the worker asks for one,
    and is bound with no reservation pod (the API server accepts the pod as it is)."""
    mps = {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"}
    cluster.add_node("m1", gpus=8, labels={**mps, "nvidia.com/gpu.count": "2"})
    b = make_backend()
    (node,) = eventually(lambda: [n for n in b.nodes() if n.name == "m1"])
    assert (node.gpu_count, node.slices, str(node.enforcement)) == (2, 4, "mps")
    b.launch(job("quarter", gpu=0.25, node_of=lambda i: "m1", gpus_of=lambda w: (0,)))
    (pod,) = eventually(
        lambda: [p for p in pods_of(cluster, "quarter") if p["spec"].get("nodeName")]
    )
    assert pod["spec"]["nodeName"] == "m1"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert env_of(pod)["SHOAL_GPU_ENFORCEMENT"] == "mps"
    assert not cluster.pods(RESERVATIONS_NS, "app.kubernetes.io/managed-by=shoal")
