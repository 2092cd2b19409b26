"""Fractions, node failures, admission refusals and leader failover on a real control
plane (Shoal on this host with the chart's ServiceAccount token; kwok as the kubelets)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import kubernetes
import pytest

from scheduler.spec import Phase

from .conftest import (
    JOBS_NS,
    RESERVATIONS_NS,
    ControlPlane,
    Shoal,
    eventually,
    token_kubeconfig,
)
from .test_jobs import Obj, phase_of, queue, running, trainingjob

pytestmark = pytest.mark.cluster
UUID = "GPU-5f0e6c4a-1111-2222-3333-444455556666"


def test_fractional_workers_share_a_reserved_gpu(
    cluster: ControlPlane,
    shoal_env: dict[str, str],
    start_shoal: Callable[..., Shoal],
    tmp_path: Path,
) -> None:
    cluster.add_node("kw-f1", gpus=1)
    queue(cluster)
    start_shoal(shoal_env)
    trainingjob(cluster, "half-a", workers=1, gpu=0.5)
    trainingjob(cluster, "half-b", workers=1, gpu=0.5)
    a = eventually(lambda: cluster.tj("half-a").get("status", {}).get("jobId"))
    b = eventually(lambda: cluster.tj("half-b").get("status", {}).get("jobId"))
    res = "shoal-gpu-kw-f1-g0"

    def reservation() -> dict[str, object] | None:
        got = [p for p in cluster.pods(RESERVATIONS_NS) if p["metadata"]["name"] == res]
        return got[0] if got and got[0]["status"].get("phase") == "Running" else None

    pod = eventually(reservation, timeout=90)
    assert pod["spec"]["nodeName"] == "kw-f1"  # type: ignore[index]
    # The workers wait, unbound, for the GPU's UUID.
    eventually(lambda: len(cluster.job_pods(a)) == 1 and len(cluster.job_pods(b)) == 1, 60)
    assert not any(p["spec"].get("nodeName") for p in cluster.job_pods(a) + cluster.job_pods(b))
    # kwok cannot run `shoal reserve`: the test plays it, patching its own pod's UUID
    # annotation as the reserver does, with the reserver's ServiceAccount (its Role).
    kc = token_kubeconfig(
        cluster, "shoal-reserve", RESERVATIONS_NS, tmp_path / "reserve.kubeconfig"
    )
    reserver = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(kc))  # type: ignore[no-untyped-call]
    )
    reserver.patch_namespaced_pod(
        res, RESERVATIONS_NS, {"metadata": {"annotations": {"shoal.dev/gpu-uuid": UUID}}}
    )
    for job_id in (a, b):
        (worker,) = running(cluster, job_id, 1)
        assert worker["spec"]["nodeName"] == "kw-f1"
        assert worker["metadata"]["annotations"]["shoal.dev/gpu-uuid"] == UUID
        limits = worker["spec"]["containers"][0]["resources"].get("limits") or {}
        assert "nvidia.com/gpu" not in limits


def test_a_notready_node_is_not_offered(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-g1", gpus=8)
    cluster.add_node("kw-g2", gpus=8)
    eventually(lambda: cluster.node_ready("kw-g1") and cluster.node_ready("kw-g2"))
    cluster.core.patch_node("kw-g1", {"metadata": {"labels": {"shoal.test/not-ready": "true"}}})
    eventually(lambda: not cluster.node_ready("kw-g1"))
    queue(cluster)
    shoal = start_shoal(shoal_env)
    eventually(lambda: "kw-g1" in shoal.runtime.backend.excluded_nodes())
    for i in range(3):
        trainingjob(cluster, f"big-{i}", workers=1, gpu=8)
    ids = [eventually(lambda i=i: cluster.tj(f"big-{i}").get("status", {}).get("jobId"))
           for i in range(3)]  # fmt: skip
    placed = eventually(
        lambda: [p for j in ids for p in cluster.job_pods(j) if p["spec"].get("nodeName")], 90
    )
    time.sleep(2)  # more cycles: still nothing goes to the NotReady node
    pods = [p for j in ids for p in cluster.job_pods(j)]
    bound = [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")]
    assert bound == ["kw-g2"], (placed, bound)


def test_a_resourcequota_refusal_does_not_stop_the_loop(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-h1", gpus=8)
    cluster.core.create_namespaced_resource_quota(
        JOBS_NS,
        {
            "metadata": {"name": "gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
        },
    )
    eventually(
        lambda: cluster.core.read_namespaced_resource_quota("gpus", JOBS_NS).status.hard or {}
    )
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "over-quota", workers=1, gpu=4)
    refused = eventually(lambda: cluster.tj("over-quota").get("status", {}).get("jobId"))
    time.sleep(2)  # let Shoal try (and be refused: 403 exceeded quota)
    trainingjob(cluster, "in-quota", workers=1, gpu=1)
    ok = eventually(lambda: cluster.tj("in-quota").get("status", {}).get("jobId"))
    running(cluster, ok, 1)
    assert not [p for p in cluster.job_pods(refused) if p["spec"].get("nodeName")]
    assert phase_of(shoal, ok).value in ("Scheduled", "Running")


def test_of_two_replicas_one_schedules_and_the_other_takes_over(
    cluster: ControlPlane,
    shoal_env: dict[str, str],
    start_shoal: Callable[..., Shoal],
) -> None:
    cluster.add_node("kw-i1", gpus=8)
    queue(cluster)
    elected = {**shoal_env, "SHOAL_LEADER_ELECTION": "true",
               "SHOAL_LEADER_ELECTION_DURATION_SECONDS": "4"}  # fmt: skip
    a = start_shoal({**elected, "SHOAL_POD_NAME": "shoal-a"})
    eventually(lambda: a.runtime.is_leader())
    b = start_shoal({**elected, "SHOAL_POD_NAME": "shoal-b"})  # same store file
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)
    lease = coordination.read_namespaced_lease("shoal-scheduler", "shoal-system")
    assert lease.spec.holder_identity == "shoal-a"
    trainingjob(cluster, "first", workers=2, gpu=1)
    first = eventually(lambda: cluster.tj("first").get("status", {}).get("jobId"))
    pods = running(cluster, first, 2)
    assert not b.runtime.is_leader()

    # Kill the leader: its loop stops and it never gives the Lease back.
    assert a.runtime.elector is not None
    a.runtime.elector.stop(release=False)
    a.stop_event.set()
    a.loop.wake()
    a.thread.join(timeout=30)
    eventually(lambda: b.runtime.is_leader(), timeout=30)
    lease = coordination.read_namespaced_lease("shoal-scheduler", "shoal-system")
    assert lease.spec.holder_identity == "shoal-b"
    trainingjob(cluster, "second", workers=2, gpu=1)
    second = eventually(lambda: cluster.tj("second").get("status", {}).get("jobId"))
    running(cluster, second, 2)
    # Nothing was launched twice: the first job's pods are the same objects.
    again = cluster.job_pods(first)
    assert sorted(p["metadata"]["uid"] for p in again) == sorted(p["metadata"]["uid"] for p in pods)


def test_pods_on_a_deleted_node_count_as_failed_and_the_job_is_re_placed(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-d1", gpus=8)
    cluster.add_node("kw-d2", gpus=8)
    eventually(lambda: cluster.node_ready("kw-d1") and cluster.node_ready("kw-d2"))
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "on-deleted", workers=1, gpu=8)
    job_id = eventually(lambda: cluster.tj("on-deleted").get("status", {}).get("jobId"))
    (first,) = running(cluster, job_id, 1, shoal)
    gone = first["spec"]["nodeName"]
    other = "kw-d2" if gone == "kw-d1" else "kw-d1"
    cluster.core.delete_node(gone)

    def replaced() -> Obj | None:
        pods = [
            p
            for p in cluster.job_pods(job_id)
            if p["spec"].get("nodeName") == other and not p["metadata"].get("deletionTimestamp")
        ]
        return pods[0] if pods else None

    second = eventually(replaced, 180)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert phase_of(shoal, job_id) not in (Phase.FAILED, Phase.CANCELLED)
