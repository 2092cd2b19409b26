"""Issue 24: a GPU reservation whose container finds no GPU (the reserver's exit 3) turns
off sharing on its node only: whole-GPU jobs still run there, and a fraction waits with
the reason in words (real kube-apiserver 1.37.2, kwok as the kubelet)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.store.cluster import load_inventory

from .conftest import RESERVATIONS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
SAID = "no GPU found: no NVML, no /proc/driver/nvidia/gpus entry, NVIDIA_VISIBLE_DEVICES=(unset)"


def no_gpu_status() -> Obj:
    """What the kubelet reports of a reserver that exited 3 and restarts."""
    return {
        "status": {
            "containerStatuses": [
                {
                    "name": "reserve",
                    "ready": False,
                    "restartCount": 1,
                    "image": "shoal",
                    "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {
                        "terminated": {"exitCode": 3, "reason": "Error", "message": SAID}
                    },
                }
            ]
        }
    }


def test_a_reservation_without_a_gpu_stops_sharing_not_whole_gpus(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-r1", gpus=8)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "half", workers=1, gpu=0.5)
    res = "shoal-gpu-kw-r1-g0"

    def reservation() -> Obj | None:
        got = [p for p in cluster.pods(RESERVATIONS_NS) if p["metadata"]["name"] == res]
        return got[0] if got and got[0]["status"].get("phase") == "Running" else None

    def excluded() -> str | None:
        # kwok writes the pod's status as it starts it; a write of ours that lands first is
        # overwritten, so say "exited 3" again until the backend has heard it.
        pod = reservation()
        said = pod and "exitCode" in str(pod["status"].get("containerStatuses"))
        if pod and not said:
            cluster.core.patch_namespaced_pod_status(res, RESERVATIONS_NS, no_gpu_status())
        return shoal.runtime.backend.excluded_nodes().get("kw-r1")

    eventually(reservation, timeout=90)
    why = eventually(excluded, 90, every=0.5)
    # The node stays offered, for whole GPUs only (before: gone from nodes() altogether).
    assert [(n.name, n.no_sharing) for n in shoal.runtime.backend.nodes()] == [("kw-r1", why)]

    # Whole GPUs still go to the node (before: the whole node was gone for 10 minutes).
    trainingjob(cluster, "whole", workers=1, gpu=4)
    whole = eventually(lambda: cluster.tj("whole").get("status", {}).get("jobId"), 60)
    (pod,) = running(cluster, whole, 1, shoal)
    assert pod["spec"]["nodeName"] == "kw-r1"

    # The fraction waits, saying why in words (before: "needs None MiB of GPU memory").
    def reason() -> str | None:
        st = cluster.tj("half").get("status", {})
        text = str(st.get("reason") or "")
        return text if st.get("phase") == "Pending" and "sharing is off" in text else None

    text = eventually(reason, 90, what=shoal.diagnose())
    assert text.startswith("needs 0.5 of one GPU; GPU sharing is off on every node"), text
    assert "kw-r1: GPU sharing is off on kw-r1: GPU reservation" in text, text
    with shoal.database.session() as s:  # what explain and the dashboard read
        assert [(n.name, n.no_sharing) for n in load_inventory(session=s)] == [("kw-r1", why)]
    assert "GPU sharing is off on kw-r1" in why and SAID in why, why
    assert "whole GPUs are still offered" in why
