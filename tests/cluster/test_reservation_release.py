"""Issue 24 item 5: a GPU a reservation pod held is offered to a whole-GPU job only once
that pod is gone (idle for its reuse grace, then Terminating), not as soon as its last
share ends (real kube-apiserver 1.37.2, kwok as the kubelet)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


def test_a_whole_gpu_job_waits_until_the_reservation_pod_is_gone(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-h1", gpus=1)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "half", workers=1, gpu=0.5)
    res = "shoal-gpu-kw-h1-g0"

    def reservation() -> Obj | None:
        got = [p for p in cluster.pods(RESERVATIONS_NS) if p["metadata"]["name"] == res]
        return got[0] if got else None

    eventually(lambda: (r := reservation()) and r["spec"].get("nodeName"), timeout=90)
    # What the reserver does on a real node; and, as a real one would, the pod stays
    # Terminating for its grace period once deleted (kwok: shoal.test/graceful).
    ann = {"shoal.dev/gpu-uuid": UUID, "shoal.test/graceful": "true"}
    cluster.core.patch_namespaced_pod(res, RESERVATIONS_NS, {"metadata": {"annotations": ann}})
    half = eventually(lambda: cluster.tj("half").get("status", {}).get("jobId"), 60)
    (share,) = running(cluster, half, 1, shoal)

    # The share ends; a whole-GPU job comes for the node's only GPU.
    done = {"metadata": {"annotations": {"shoal.test/phase": "Succeeded"}}}
    cluster.core.patch_namespaced_pod(share["metadata"]["name"], JOBS_NS, done)
    trainingjob(cluster, "whole", workers=1, gpu=1)
    whole = eventually(lambda: cluster.tj("whole").get("status", {}).get("jobId"), 60)

    seen: list[str] = []  # the reservation's state at each look while the job waits

    def bound() -> Obj | None:
        pods = cluster.job_pods(whole)
        if pods and pods[0]["spec"].get("nodeName"):
            return pods[0]
        r = reservation()
        seen.append("gone" if r is None else "terminating" if r["metadata"].get(
            "deletionTimestamp") else "idle")  # fmt: skip
        return None

    start = time.monotonic()
    pod = eventually(bound, timeout=120, every=0.2)
    # Bound only once the reservation pod is gone (before: 0.2 s after the share ended,
    # with the reservation still holding the GPU on the kubelet for ~28 s more).
    assert reservation() is None, f"bound after {time.monotonic() - start:.1f}s; seen {seen}"
    assert pod["spec"]["nodeName"] == "kw-h1"
    assert "terminating" in seen, seen  # it waited through the pod's Terminating period too
    running(cluster, whole, 1, shoal)
