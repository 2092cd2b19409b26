"""Issue 24 item 4: GPU sharing where the device plugin hands GPUs over by CDI (real
kube-apiserver 1.37.2, kwok as the kubelet; its RuntimeClass admission checks the class
exists). With the chart's workerRuntimeClassName and shareCdiKind, shares and their
reservation run in the NVIDIA runtime's class and a share's NVIDIA_VISIBLE_DEVICES names
its GPU by CDI device name; without a worker RuntimeClass, a node whose reservation got its
GPU by CDI is excluded from sharing with the reason, and the fraction waits saying so."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


@pytest.fixture
def nvidia_class(cluster: ControlPlane) -> Iterator[str]:
    """The RuntimeClass the GPU Operator makes for the NVIDIA Container Runtime."""
    api = kubernetes.client.NodeV1Api(cluster.api)
    body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}}
    api.create_runtime_class({**body, "handler": "nvidia"})
    yield "nvidia"
    api.delete_runtime_class("nvidia")


def reservation(cluster: ControlPlane, name: str) -> Obj | None:
    got = [p for p in cluster.pods(RESERVATIONS_NS) if p["metadata"]["name"] == name]
    return got[0] if got and got[0]["spec"].get("nodeName") else None


def report_cdi(cluster: ControlPlane, name: str) -> None:
    """What the reserver publishes on a node whose device plugin uses CDI."""
    ann = {"shoal.dev/gpu-uuid": UUID, "shoal.dev/gpu-delivery": "cdi"}
    cluster.core.patch_namespaced_pod(name, RESERVATIONS_NS, {"metadata": {"annotations": ann}})


def with_options(env: dict[str, str], **options: Any) -> dict[str, str]:
    path = Path(env["SHOAL_KUBE_OPTIONS_FILE"])
    path.write_text(json.dumps({**json.loads(path.read_text()), **options}))
    return env


def test_shares_run_in_the_nvidia_runtime_class_and_name_their_gpu_by_cdi(
    cluster: ControlPlane,
    shoal_env: dict[str, str],
    start_shoal: Callable[..., Shoal],
    nvidia_class: str,
) -> None:
    cluster.add_node("kw-c1", gpus=2)
    queue(cluster)
    env = with_options(
        shoal_env, workerRuntimeClass=nvidia_class, shareCdiKind="runtime.nvidia.com/gpu"
    )
    shoal = start_shoal(env)
    trainingjob(cluster, "half", workers=1, gpu=0.5)
    res = "shoal-gpu-kw-c1-g0"
    pod = eventually(lambda: reservation(cluster, res), timeout=90, what="reservation bound")
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    report_cdi(cluster, res)
    job_id = eventually(lambda: cluster.tj("half").get("status", {}).get("jobId"), 60)
    (share,) = running(cluster, job_id, 1, shoal)
    assert share["spec"]["runtimeClassName"] == "nvidia"
    ann = share["metadata"]["annotations"]
    # The variable the NVIDIA runtime in CDI mode reads names the device by CDI name
    # (before: a cdi.k8s.io pod annotation, which the kubelet never passes on).
    assert ann["shoal.dev/gpu-device"] == f"runtime.nvidia.com/gpu={UUID}"
    assert not any(k.startswith("cdi.k8s.io/") for k in ann)
    (env_var,) = [
        e for e in share["spec"]["containers"][0]["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"
    ]
    assert env_var["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['shoal.dev/gpu-device']"
    )
    assert not shoal.runtime.backend.excluded_nodes()


def test_a_cdi_node_without_a_worker_runtime_class_is_excluded_from_sharing(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-c2", gpus=2)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "half", workers=1, gpu=0.5)
    res = "shoal-gpu-kw-c2-g0"
    eventually(lambda: reservation(cluster, res), timeout=90, what="reservation bound")
    report_cdi(cluster, res)

    def excluded() -> str | None:
        why = shoal.runtime.backend.excluded_nodes().get("kw-c2")
        return why if why and "GPU sharing is off" in why else None

    why = eventually(excluded, 60, what=f"{shoal.runtime.backend.excluded_nodes()}")
    assert why.startswith(f"GPU sharing is off on kw-c2: GPU reservation {res} got its GPU by CDI")
    assert "set workerRuntimeClassName" in why and "whole GPUs are still offered" in why
    assert [(n.name, n.no_sharing) for n in shoal.runtime.backend.nodes()] == [("kw-c2", why)]

    def reason() -> str | None:
        st = cluster.tj("half").get("status", {})
        text = str(st.get("reason") or "")
        return text if st.get("phase") == "Pending" and "sharing is off" in text else None

    text = eventually(reason, 90, what=shoal.diagnose())
    assert "got its GPU by CDI" in text, text
    # The share was never bound: it would have run with no GPU.
    assert not any(p["spec"].get("nodeName") for p in cluster.pods(JOBS_NS))
