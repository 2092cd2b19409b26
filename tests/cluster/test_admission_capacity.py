"""Issue 24, "can never run": both front doors judge a job against what the nodes could
hold if empty, not against the free room the loop last saw. A pod of another scheduler
holding one GPU of an 8-GPU node, and a cordoned 8-GPU node, leave a job that needs 8
GPUs per worker pending with a reason, never refused (real kube-apiserver 1.37.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.feasibility_cache import FeasibilitySnapshot
from scheduler.spec import JobSpec
from scheduler.store.cluster import load_capacity, load_inventory, load_queues

from .conftest import ControlPlane, Shoal, eventually
from .test_jobs import queue, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def foreign_gpu_pod(cp: ControlPlane, node: str) -> None:
    """A pod no scheduler of Shoal's placed (already bound), holding one GPU there."""
    cp.core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "other-team"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {
                            "requests": {"nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
        },
    )


def spec(workers: int, gpu: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": f"w{workers}-g{gpu}",
            "queue": "vision",
            "framework": "pytorch",
            "image": "ghcr.io/x/train:1",
            "command": ["python", "train.py"],
            "workers": workers,
            "gpu": gpu,
            "cpu": "1",
            "memory": "1Gi",
        }
    )


def busy_and_cordoned(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> Shoal:
    """Two 8-GPU nodes: one GPU of kw-c1 held by another team's pod, kw-c2 cordoned;
    Shoal running and its store showing that free room (7 GPUs on kw-c1 alone)."""
    cluster.add_node("kw-c1", gpus=8)
    cluster.add_node("kw-c2", gpus=8)
    eventually(lambda: cluster.node_ready("kw-c1") and cluster.node_ready("kw-c2"))
    foreign_gpu_pod(cluster, "kw-c1")
    cluster.kubectl("cordon", "kw-c2")
    queue(cluster)
    shoal = start_shoal(shoal_env)

    def seen() -> bool:
        with shoal.database.session() as s:
            free = {n.name: n.gpu_count for n in load_inventory(session=s)}
            queues = {q.name for q in load_queues(session=s)}
        return free == {"kw-c1": 7} and "vision" in queues

    eventually(seen, timeout=90)
    return shoal


def test_rest_refuses_only_what_no_node_could_ever_hold(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    shoal = busy_and_cordoned(cluster, shoal_env, start_shoal)
    rest = FeasibilitySnapshot(ttl_s=0)  # the admission the POST route runs
    with shoal.database.session() as s:
        one_node = rest.check_job(s, spec(1, 8), may_submit=lambda q: True)
        both_nodes = rest.check_job(s, spec(2, 8), may_submit=lambda q: True)
        too_big = rest.check_job(s, spec(1, 16), may_submit=lambda q: True)
        too_many = rest.check_job(s, spec(3, 8), may_submit=lambda q: True)
    assert one_node == [] and both_nodes == []
    assert [p.msg for p in too_big] == [
        "needs 16 GPUs on one node per worker; the largest node has 8"
    ]
    assert "holds at most 2 of them" in too_many[0].msg
    with shoal.database.session() as s:
        capacity = {n.name: n.gpu_count for n in load_capacity(session=s)}
    assert capacity == {"kw-c1": 8, "kw-c2": 8}


def test_a_trainingjob_beyond_the_free_room_waits_and_is_never_invalid(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    busy_and_cordoned(cluster, shoal_env, start_shoal)
    trainingjob(cluster, "big", workers=2, gpu=8)
    status = eventually(lambda: cluster.tj("big").get("status", {}).get("phase") and
                        cluster.tj("big")["status"], 60)  # fmt: skip
    assert status["phase"] != "Invalid", status
    status = eventually(
        lambda: (st := cluster.tj("big").get("status", {})).get("reason") and st, 60
    )
    assert status["phase"] == "Pending" and status["jobId"], status
    assert not cluster.job_pods(status["jobId"])
