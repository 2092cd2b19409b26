"""Launch, status and stop of whole-GPU and CPU jobs through the fake API server."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from scheduler.backends.base import WorkerState
from scheduler.backends.kubernetes import ApiError, KubernetesBackend
from scheduler.spec import Origin

from .conftest import NS, env_of, eventually, job, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
OWNER = Origin("TrainingJob", NS, "resnet", "3f1c0c8e-1111-4e0b-9d55-0123456789ab")


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    for n in ("n1", "n2"):
        kube.put("nodes", node(n))
    return kube


def test_pytorch_job_gets_a_service_and_four_bound_pods(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    req = job(
        "resnet",
        workers=4,
        gpu=2,
        node_of=lambda i: "n1" if i < 2 else "n2",
        gpus_of=lambda i: (2 * (i % 2), 2 * (i % 2) + 1),
        owner=OWNER,
    )
    b.launch(req)
    (svc,) = cluster.objects("services", NS)
    assert svc["metadata"]["name"] == "resnet"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    pods = cluster.objects("pods", NS)
    assert [p["metadata"]["name"] for p in pods] == [f"resnet-a0-w{i}" for i in range(4)]
    master = "resnet-a0-w0.resnet.jobs.svc"
    for i, p in enumerate(pods):
        spec, meta = p["spec"], p["metadata"]
        assert spec["nodeName"] == ("n1" if i < 2 else "n2")
        assert cluster.bindings[(NS, meta["name"])] == 1
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
        assert meta["ownerReferences"][0]["kind"] == "TrainingJob"
        assert meta["ownerReferences"][0]["uid"] == OWNER.uid
        assert meta["annotations"]["shoal.dev/gpus"] == ("0,1" if i % 2 == 0 else "2,3")
        c = spec["containers"][0]
        assert c["resources"]["requests"] == {
            "cpu": "2000m",
            "memory": "8192Mi",
            "nvidia.com/gpu": "2",
        }
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
    reasons = {e["reason"] for e in cluster.objects("events", NS)}
    assert {"Scheduled", "Launched"} <= reasons


def test_repeating_a_launch_creates_and_binds_nothing_more(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    req = job("again", workers=2)
    b.launch(req)
    binds_before = sum(1 for m, p in cluster.requests if p.endswith("/binding"))
    b.launch(req)
    assert all(n == 1 for n in cluster.creates.values())
    assert sum(1 for m, p in cluster.requests if p.endswith("/binding")) == binds_before


def test_tf_config_lists_every_worker(cluster: FakeKube, make_backend: Make) -> None:
    make_backend().launch(job("tfjob", workers=3, framework="tensorflow", gpu=None))
    for i, p in enumerate(cluster.objects("pods", NS)):
        tf = json.loads(env_of(p)["TF_CONFIG"])
        assert tf["cluster"]["worker"] == [
            f"tfjob-a0-w{w}.tfjob.jobs.svc:{29501 + w}" for w in range(3)
        ]
        assert tf["task"] == {"type": "worker", "index": i}
        assert env_of(p)["NVIDIA_VISIBLE_DEVICES"] == "void"  # CPU-only sees no GPU
        assert "nvidia.com/gpu" not in p["spec"]["containers"][0]["resources"]["requests"]


def test_mpi_hostfile_is_a_mounted_config_map(cluster: FakeKube, make_backend: Make) -> None:
    make_backend().launch(job("mpi", workers=2, framework="mpi"))
    (cm,) = cluster.objects("configmaps", NS)
    assert (
        cm["data"]["hostfile"] == "mpi-a0-w0.mpi.jobs.svc slots=1\nmpi-a0-w1.mpi.jobs.svc slots=1\n"
    )
    p = cluster.objects("pods", NS)[0]
    mounts = {m["mountPath"]: m for m in p["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/etc/shoal/hostfile"]["subPath"] == "hostfile"
    assert env_of(p)["OMPI_MCA_orte_default_hostfile"] == "/etc/shoal/hostfile"


def test_failed_worker_reports_its_exit_code(cluster: FakeKube, make_backend: Make) -> None:
    b = make_backend()
    b.launch(job("crash", workers=2))
    eventually(lambda: len(b.workers()) == 2)
    cluster.update(
        "pods",
        "crash-a0-w1",
        NS,
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "worker",
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    }
                ],
            }
        },
    )
    cluster.update("pods", "crash-a0-w0", NS, {"status": {"phase": "Running"}})
    w = eventually(lambda: [w for w in b.workers() if w.state is WorkerState.FAILED])
    assert (w[0].worker, w[0].exit_code, w[0].message, w[0].node) == (1, 137, "OOMKilled", "n1")
    assert b.workers()[0].state is WorkerState.RUNNING
    eventually(lambda: any(e["reason"] == "WorkerFailed" for e in cluster.objects("events", NS)))


def test_stop_deletes_pods_with_grace_and_the_service(
    cluster: FakeKube, make_backend: Make
) -> None:
    b = make_backend()
    b.launch(job("victim", workers=2, framework="mpi"))
    b.stop("victim", 45, reason="Preempted")
    assert cluster.objects("pods", NS) == []
    assert cluster.objects("services", NS) == cluster.objects("configmaps", NS) == []
    graces = {(r, n): g for r, _, n, g in cluster.deletions}
    assert graces[("pods", "victim-a0-w0")] == 45
    assert any(e["reason"] == "Preempted" for e in cluster.objects("events", NS))
    b.stop("victim", 45)  # idempotent


def test_restart_mid_launch_creates_nothing_twice(cluster: FakeKube, make_backend: Make) -> None:
    first = make_backend(retry_deadline_s=0.3)
    req = job("gang", workers=4)
    # The third pod's creation keeps failing: the first backend gives up mid-launch.
    cluster.inject(50, 500, path="/namespaces/jobs/pods", method="POST", skip=2)
    with pytest.raises(ApiError):
        first.launch(req)
    first.close()
    assert len(cluster.objects("pods", NS)) == 2
    cluster.faults.clear()
    second = make_backend()
    second.launch(req)
    pods = cluster.objects("pods", NS)
    assert len(pods) == 4 and all(p["spec"].get("nodeName") == "n1" for p in pods)
    assert all(n == 1 for n in cluster.creates.values()), cluster.creates
    assert all(n == 1 for n in cluster.bindings.values()), cluster.bindings
    alloc = eventually(lambda: second.allocations().get("gang"))
    assert [p.worker for p in alloc.placements] == [0, 1, 2, 3]


def test_reconcile_binds_pods_a_crash_left_unbound(cluster: FakeKube, make_backend: Make) -> None:
    first = make_backend(retry_deadline_s=0.3)
    cluster.inject(50, 500, path="/binding")
    with pytest.raises(ApiError):
        first.launch(job("half", workers=2))
    first.close()
    cluster.faults.clear()
    make_backend()  # its reconcile step finishes the launch
    eventually(lambda: all(p["spec"].get("nodeName") for p in cluster.objects("pods", NS)))
    assert all(n == 1 for n in cluster.bindings.values())


def test_a_pod_that_is_not_shoals_is_not_taken_over(cluster: FakeKube, make_backend: Make) -> None:
    cluster.put("pods", pod("taken-a0-w0", ns=NS))
    with pytest.raises(ApiError, match="does not belong"):
        make_backend().launch(job("taken"))


def test_allocations_are_rebuilt_from_pods(cluster: FakeKube, make_backend: Make) -> None:
    make_backend().launch(job("old", workers=2, gpu=2, node_of=lambda i: f"n{i + 1}"))
    fresh = make_backend()
    alloc = eventually(lambda: fresh.allocations().get("old"))
    assert alloc.attempt == 0 and alloc.queue == "vision"
    assert [(p.node, p.gpus, p.fraction) for p in alloc.placements] == [
        ("n1", (0, 1), 1.0),
        ("n2", (2, 3), 1.0),
    ]
    assert [n.gpu_count for n in fresh.nodes()] == [8, 8]  # Shoal's pods aren't "foreign"


def test_finished_jobs_objects_go_after_the_ttl(cluster: FakeKube, make_backend: Make) -> None:
    b = make_backend(finished_ttl_s=0.3)
    b.launch(job("short", workers=2))
    b.launch(job("long", workers=1))
    for i in range(2):
        cluster.update("pods", f"short-a0-w{i}", NS, {"status": {"phase": "Succeeded"}})
    eventually(
        lambda: [p["metadata"]["name"] for p in cluster.objects("pods", NS)] == ["long-a0-w0"],
        timeout=15,  # the reconcile pass runs every 2 s; a loaded machine stretches that
    )
    eventually(
        lambda: [s["metadata"]["name"] for s in cluster.objects("services", NS)] == ["long"],
        timeout=15,  # the Service goes in the same pass, just after the pods
    )


def test_repeated_stops_of_a_draining_job_make_no_api_calls(
    cluster: FakeKube, make_backend: Make
) -> None:
    cluster.graceful_pod_deletes = True
    b = make_backend()
    b.launch(job("drain", workers=2))
    b.stop("drain", 30)
    eventually(
        lambda: all(p["metadata"].get("deletionTimestamp") for p in b.pod_cache.items()),
        timeout=10,
    )
    before = len(cluster.requests)
    for _ in range(5):  # the loop's orphan sweep, cycle after cycle
        b.stop("drain", 30)
    assert len(cluster.requests) == before
    b.launch(job("drain", workers=2, attempt=1))  # a new attempt: a stop acts again
    b.stop("drain", 30)
    assert len(cluster.requests) > before


def test_retry_after_is_honoured_and_calls_are_rate_limited(
    cluster: FakeKube, make_backend: Make
) -> None:
    from scheduler.backends.kubernetes.api import TokenBucket

    b = make_backend()
    cluster.inject(1, 429, path="/api/v1/nodes/n1", retry_after="1")
    assert b.kube.get("nodes", "n1") is not None
    assert b.kube.waits[-1] == 1.0  # the server's Retry-After, not the 0.05 s backoff
    t = [0.0]
    slept: list[float] = []
    bucket = TokenBucket(10, 2, clock=lambda: t[0], sleep=slept.append)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    t[0] += 1.0  # refilled (at most the burst)
    assert bucket.take() == 0.0 and slept == [pytest.approx(0.1)]
