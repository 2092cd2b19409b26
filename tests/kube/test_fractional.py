"""Fractional GPUs: a reservation pod per shared GPU, workers bound once its UUID is
known, the reservation released with the last share; and foreign pods adopted."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from support.builders import launch_request

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.pods import workerpod
from scheduler.backends.kubernetes.reservations import reservationpod, reserve
from scheduler.model import WorkerPlacement

from .conftest import NS, env_of, eventually, job, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
RES = "shoal-gpu-n1-g0"
GPU_MILLI = "shoal.dev/gpu-milli"
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


def run_reserve(kube: FakeKube, name: str = RES) -> None:
    """What the reservation pod's process does once the device plugin gave it a GPU."""
    env = {
        "POD_NAME": name,
        "POD_NAMESPACE": NS,
        "NVIDIA_VISIBLE_DEVICES": UUID,
        "SHOAL_KUBE_HOST": kube.url,
    }
    assert reserve.main(env, wait=False) == 0


def test_four_quarter_jobs_share_one_reserved_gpu(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend()
    for i in range(4):
        b.launch(job(f"q{i}", gpu=0.25, gpus_of=lambda w: (0,)))
    (res,) = [p for p in kube.objects("pods", NS) if p["metadata"]["name"] == RES]
    assert res["spec"]["nodeName"] == "n1"
    assert res["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert res["spec"]["containers"][0]["command"] == reservationpod.RESERVER
    workers = [p for p in kube.objects("pods", NS) if p["metadata"]["name"] != RES]
    assert len(workers) == 4 and not any(p["spec"].get("nodeName") for p in workers)
    assert {w.message for w in eventually(b.workers)} == {"waiting for the GPU reservation's UUID"}

    run_reserve(kube)
    eventually(lambda: all(p["spec"].get("nodeName") == "n1" for p in kube.objects("pods", NS)))
    for p in kube.objects("pods", NS):
        if p["metadata"]["name"] == RES:
            continue
        assert p["metadata"]["annotations"]["shoal.dev/gpu-uuid"] == UUID
        assert p["metadata"]["annotations"]["shoal.dev/gpu-device"] == UUID
        resources = p["spec"]["containers"][0]["resources"]
        assert "nvidia.com/gpu" not in resources["requests"]
        # Its share, charged in its namespace (issue 37 item 5).
        assert resources["requests"][GPU_MILLI] == resources["limits"][GPU_MILLI] == "250"
        env = env_of(p)
        assert env["NVIDIA_VISIBLE_DEVICES"] == {
            "fieldRef": {"fieldPath": "metadata.annotations['shoal.dev/gpu-device']"}
        }
        assert (env["SHOAL_GPU_FRACTION"], env["SHOAL_GPU_ENFORCEMENT"]) == ("0.2500", "advisory")
    alloc = eventually(lambda: len(b.allocations()) == 4 and b.allocations())
    assert {a.placements for a in alloc.values()} == {(WorkerPlacement(0, "n1", (0,), 0.25),)}
    assert eventually(b.nodes)[0].gpu_count == 8  # the reservation is Shoal's own
    status = kube.obj("nodes", "n1", "")["status"]
    assert status["capacity"][GPU_MILLI] == status["allocatable"][GPU_MILLI] == "8000"
    node_patches = [r for r in kube.requests if r == ("PATCH", "/api/v1/nodes/n1/status")]
    assert len(node_patches) == 1  # advertised once, not per share

    for i in range(3):
        b.stop(f"q{i}", 0)
        assert kube.get("pods", RES, NS) is not None  # shares remain
    b.stop("q3", 0)
    assert kube.get("pods", RES, NS) is None  # the last share went


def test_reservation_left_unused_is_swept(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend()
    b.launch(job("done", gpu=0.5, gpus_of=lambda w: (0,)))
    run_reserve(kube)
    eventually(lambda: kube.obj("pods", "done-a0-w0", NS)["spec"].get("nodeName"))
    kube.update("pods", "done-a0-w0", NS, {"status": {"phase": "Succeeded"}})
    eventually(lambda: kube.get("pods", RES, NS) is None)


def test_foreign_pods_are_discovered_and_bound(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    kube.put(
        "pods",
        pod(
            "notebook",
            phase="Pending",
            scheduler="shoal",
            labels={"shoal.dev/queue": "research"},
            annotations={"shoal.dev/gpu-fraction": "0.5"},
            requests={"cpu": "1", "memory": "4Gi"},
        ),
    )
    kube.put(
        "pods",
        pod(
            "serve",
            phase="Pending",
            scheduler="shoal",
            labels={"shoal.dev/queue": "research"},
            annotations={"shoal.dev/gpu-memory": "20Gi"},
        ),
    )
    kube.put("pods", pod("other", phase="Pending"))  # kube-scheduler's
    b = make_backend()
    found = b.foreign_pods()
    assert [(f.name, f.queue, f.gpu, f.gpu_memory_mib) for f in found] == [
        ("notebook", "research", 0.5, None),
        ("serve", "research", 0.0, 20480),
    ]
    nb = found[0]
    req = nb.to_job_request()
    assert (req.id, req.gpu, req.cpu_milli, req.memory_mib) == (
        "pod:default/notebook",
        0.5,
        1000,
        4096,
    )
    assert b.bind(nb, WorkerPlacement(0, "n1", (0,), 0.5)) is False  # no UUID yet
    run_reserve(kube)
    eventually(lambda: kube.obj("pods", "notebook", "default")["spec"].get("nodeName") == "n1")
    adopted = kube.obj("pods", "notebook", "default")
    assert adopted["metadata"]["annotations"]["shoal.dev/gpu-uuid"] == UUID
    eventually(lambda: [f.name for f in b.foreign_pods()] == ["serve"])
    alloc = eventually(lambda: b.allocations().get("pod:default/notebook"))
    assert alloc.placements == (WorkerPlacement(0, "n1", (0,), 0.5),)
    assert [(w.job_id, w.gpus, w.fraction, w.queue) for w in b.workers()] == [
        ("pod:default/notebook", (0,), 0.5, "research")
    ]
    b.stop("pod:default/notebook", 5)
    assert kube.get("pods", "notebook", "default") is None


def test_reserve_reads_the_uuid_from_the_environment(kube: FakeKube) -> None:
    assert reserve.read_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": UUID}) == UUID
    for bad in ("", "all", "GPU-a,GPU-b"):
        with pytest.raises(RuntimeError):
            reserve.read_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": bad})
    assert reserve.main({"NVIDIA_VISIBLE_DEVICES": UUID}, wait=False) == 2


def test_reserve_prefers_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetUUID=lambda h: UUID.encode(),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert reserve.read_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": "GPU-other"}) == UUID


def test_shares_get_the_cdi_device_name_when_configured(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(share_cdi_kind="runtime.nvidia.com/gpu", runtime_class="nvidia")
    b.launch(job("cdi", gpu=0.5, gpus_of=lambda w: (0,)))
    run_reserve(kube)
    eventually(lambda: kube.obj("pods", "cdi-a0-w0", NS)["spec"].get("nodeName") == "n1")
    ann = kube.obj("pods", "cdi-a0-w0", NS)["metadata"]["annotations"]
    # NVIDIA_VISIBLE_DEVICES (from this annotation) names the CDI device, which the NVIDIA
    # runtime in CDI mode resolves; a pod annotation itself never reaches the runtime.
    assert ann["shoal.dev/gpu-device"] == f"runtime.nvidia.com/gpu={UUID}"
    assert not any(k.startswith("cdi.k8s.io/") for k in ann)
    assert kube.obj("pods", "cdi-a0-w0", NS)["spec"]["runtimeClassName"] == "nvidia"
    assert env_of(kube.obj("pods", "cdi-a0-w0", NS))["PET_NPROC_PER_NODE"] == "1"


def test_a_refused_binding_in_the_background_fails_only_that_worker(
    kube: FakeKube, make_backend: Make
) -> None:
    from .loopkit import of_job

    kube.put("nodes", node("n1"))
    b = make_backend(reconcile_interval_s=0)
    b.launch(job("denied", gpu=0.5, gpus_of=lambda w: (0,)))
    b.launch(job("fine", gpu=0.5, gpus_of=lambda w: (0,)))
    kube.deny("pods", of_job("denied"), 403, verb="bind")
    run_reserve(kube)
    eventually(lambda: len(b.pod_cache.items()) == 3)
    b.reconcile()  # does not raise: one pod's refusal is that pod's
    assert kube.obj("pods", "fine-a0-w0", NS)["spec"].get("nodeName") == "n1"
    (w,) = [w for w in b.workers() if w.job_id == "denied"]
    assert w.state.value == "Failed" and w.retryable and "binding refused: 403" in w.message


def test_gpu_workers_get_a_memory_backed_dev_shm_and_fractions_none() -> None:
    """Issue 24 item 6: a whole-GPU worker gets /dev/shm as an emptyDir (medium Memory),
    half its memory by default (8 Gi here) or `shm_mib`; 0 turns it off; the worker pod
    carries `priority_class`. A CPU-only worker gets no /dev/shm."""

    def shm(pod: dict[str, Any]) -> list[dict[str, Any]]:
        return [v["emptyDir"] for v in pod["spec"]["volumes"] if v["name"] == "dshm"]

    def pod(cfg: KubeConfig, gpu: float | None = 2) -> dict[str, Any]:
        req = launch_request("shm", gpu=gpu)
        (p,) = req.placements
        return workerpod.worker_pod(req, p, "shm", "jobs", ["h0"], cfg)

    default = pod(KubeConfig())
    assert shm(default) == [{"medium": "Memory", "sizeLimit": "4096Mi"}]
    mount = default["spec"]["containers"][0]["volumeMounts"][-1]
    assert mount == {"name": "dshm", "mountPath": "/dev/shm"}
    assert "priorityClassName" not in default["spec"]
    tuned = pod(KubeConfig(shm_mib=1024, priority_class="training"))
    assert shm(tuned) == [{"medium": "Memory", "sizeLimit": "1024Mi"}]
    assert tuned["spec"]["priorityClassName"] == "training"
    assert shm(pod(KubeConfig(shm_mib=0))) == []
    req = launch_request("shm", gpu=1)
    req = replace(req, spec=req.spec.model_copy(update={"priority_class_name": "urgent"}))
    (p,) = req.placements
    own = workerpod.worker_pod(req, p, "shm", "jobs", ["h0"], KubeConfig(priority_class="training"))
    assert own["spec"]["priorityClassName"] == "urgent"  # the job's own class wins
    assert shm(pod(KubeConfig(), gpu=None)) == []


def test_a_node_that_cannot_advertise_the_share_refuses_the_launch(
    kube: FakeKube, make_backend: Make
) -> None:
    """Without `nodes/status` patch (an older chart's RBAC) the share's charge cannot be
    advertised: the launch fails with the API server's words, and makes no worker."""
    kube.put("nodes", node("n1"))
    b = make_backend()
    kube.inject(1, 403, path="/api/v1/nodes/n1/status", method="PATCH")
    with pytest.raises(Exception, match="403"):
        b.launch(job("half", gpu=0.5, gpus_of=lambda w: (0,)))
    assert kube.objects("pods", NS) == []
    b.launch(job("half", gpu=0.5, gpus_of=lambda w: (0,)))  # the next try advertises
    assert kube.obj("nodes", "n1", "")["status"]["capacity"][GPU_MILLI] == "8000"
