"""Nominees beside kube-scheduler (issue 36 item 5), on a control plane of its own with
kube-scheduler running and the chart installed with its defaults.

nlp borrows a whole 8-GPU node with a worker that takes its grace period to go; vision's
guarantee reclaims it. While the borrower terminates, a pod of kube-scheduler's asking
the same 8 GPUs is created: kube-scheduler retries it the moment the borrower is gone,
before Shoal's next cycle launches the owner. The nominee Shoal made for the victim
(gated, `nominatedNodeName` the node) keeps it off: the owner gets the node, the
intruder stays Pending with kube-scheduler's own reason.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, eventually
from .localshoal import Shoal
from .test_jobs import running
from .test_lifecycle import reclaim_a_whole_node

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
NODE = "kw-nom"


def intruder() -> Obj:
    gpus = {"nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "intruder"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "100m", **gpus}, "limits": gpus}}
            ],
            "nodeSelector": {"kubernetes.io/hostname": NODE},
        },
    }  # fmt: skip


def pod(cp: ControlPlane, name: str, namespace: str) -> Obj | None:
    return next((p for p in cp.pods(namespace) if p["metadata"]["name"] == name), None)


def test_kube_scheduler_leaves_a_preemptors_room_while_its_victim_terminates(
    beside: ControlPlane, shoal_beside: Shoal
) -> None:
    beside.add_node(NODE, gpus=8)
    victim, owner = reclaim_a_whole_node(beside)

    def nominee() -> Obj | None:
        made = beside.pods(RESERVATIONS_NS, "app.kubernetes.io/component=nominee")
        return next((p for p in made if p["status"].get("nominatedNodeName")), None)

    held = eventually(nominee, timeout=90, what="a nominee for the victim")
    assert held["metadata"]["namespace"] == RESERVATIONS_NS
    assert held["status"]["nominatedNodeName"] == NODE
    assert held["spec"]["schedulerName"] == "default-scheduler"
    assert held["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    beside.core.create_namespaced_pod("default", intruder())
    # Through the borrower's grace period and the owner's launch, the intruder waits.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = pod(beside, "intruder", "default")
        assert got is not None and not got["spec"].get("nodeName"), (
            f"kube-scheduler bound the intruder to {got and got['spec'].get('nodeName')} "
            "while Shoal's preemptor waited for the room"
        )
        if any(p["spec"].get("nodeName") == NODE for p in beside.job_pods(owner)):
            break
        time.sleep(0.2)
    (placed,) = running(beside, owner, 1)
    assert placed["spec"]["nodeName"] == NODE
    assert pod(beside, victim["metadata"]["name"], JOBS_NS) is None

    def unschedulable() -> str:
        got = pod(beside, "intruder", "default") or {}
        conds = (got.get("status") or {}).get("conditions") or []
        return next((c.get("message", "") for c in conds if c.get("type") == "PodScheduled"), "")

    assert "Insufficient nvidia.com/gpu" in eventually(unschedulable, timeout=60)
    assert not (pod(beside, "intruder", "default") or {}).get("spec", {}).get("nodeName")
