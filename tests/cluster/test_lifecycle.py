"""Admission, foreign pods, reclaim with graceful deletion and `helm uninstall` on a real
control plane."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import JOBS_NS, Chart, ControlPlane, Shoal, eventually, install, uninstall
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def test_pod_security_baseline_is_enforced_in_the_jobs_namespace(cluster: ControlPlane) -> None:
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged", "namespace": JOBS_NS},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(privileged), check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr
    # (Shoal's own worker pods pass: every other test here runs them in this namespace.)


def test_a_foreign_pod_with_schedulername_shoal_is_bound(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-j1", gpus=4)
    queue(cluster)
    start_shoal(shoal_env)
    cluster.core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "notebook", "labels": {"shoal.dev/queue": "vision"}},
            "spec": {
                "schedulerName": "shoal",
                "containers": [
                    {
                        "name": "nb",
                        "image": "jupyter/base-notebook",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
        },
    )

    def bound() -> Obj | None:
        p = cluster.api.sanitize_for_serialization(
            cluster.core.read_namespaced_pod("notebook", "default")
        )
        return p if p["spec"].get("nodeName") and p["status"].get("phase") == "Running" else None

    pod = eventually(bound, timeout=90)
    assert pod["spec"]["nodeName"] == "kw-j1"
    assert pod["metadata"]["annotations"]["shoal.dev/job-id"] == "pod:default/notebook"


def reclaim_a_whole_node(cp: ControlPlane) -> tuple[Obj, str]:
    """nlp (no guarantee) borrows a whole 8-GPU node with a worker that takes its 8 s
    grace period to go (kwok: shoal.test/graceful), then vision's guarantee of 8 reclaims
    it: (the borrower's pod, the owner's job id). The node is the caller's, with Shoal
    running or about to."""
    queue(cp, "vision", total=8)
    queue(cp, "nlp", total=0)
    trainingjob(cp, "borrower", queue="nlp", workers=1, gpu=8,
                terminationGracePeriodSeconds=8)  # fmt: skip
    borrower = eventually(lambda: cp.tj("borrower").get("status", {}).get("jobId"))
    (victim,) = running(cp, borrower, 1)
    cp.core.patch_namespaced_pod(
        victim["metadata"]["name"],
        JOBS_NS,
        {"metadata": {"annotations": {"shoal.test/graceful": "true"}}},
    )
    trainingjob(cp, "owner", queue="vision", workers=1, gpu=8)
    return victim, eventually(lambda: cp.tj("owner").get("status", {}).get("jobId"))


def test_reclaim_waits_for_the_graceful_deletion_of_the_borrower(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-k1", gpus=8)
    start_shoal(shoal_env)
    victim, owner = reclaim_a_whole_node(cluster)
    names = {victim["metadata"]["name"]}
    terminating_seen = False
    overlap: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = [p for p in cluster.pods() if p["metadata"]["name"] in names]
        terminating_seen |= any(p["metadata"].get("deletionTimestamp") for p in left)
        bound = [
            p["metadata"]["name"] for p in cluster.job_pods(owner) if p["spec"].get("nodeName")
        ]
        if left and bound:
            overlap = bound  # bound onto GPUs the terminating pod still holds
            break
        if not left and bound:
            break
        time.sleep(0.2)
    assert terminating_seen, "the borrower was never deleted"
    assert not overlap, f"{overlap} bound while {names} was still terminating"
    running(cluster, owner, 1)


def test_helm_uninstall_keeps_trainingjobs_and_the_jobs_namespace(
    cluster: ControlPlane, chart: Chart
) -> None:
    """The session's release is uninstalled, checked, and installed again (with a fresh
    token for its new ServiceAccount, for the tests that follow)."""
    trainingjob(cluster, "kept", workers=1, gpu=1)
    try:
        uninstall(cluster)
        ns = cluster.core.read_namespace(JOBS_NS)
        assert ns.status.phase == "Active" and not ns.metadata.deletion_timestamp
        assert cluster.tj("kept")["metadata"]["name"] == "kept"
    finally:
        install(cluster, chart)
