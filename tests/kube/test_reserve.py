"""The reservation pod's process: tiny (no CLI, no kubernetes client, peak RSS under its
limit), the GPU UUID from the driver, only `GPU-…`/`MIG-…` accepted; and the pod it runs
in (pull secrets, PriorityClass, RuntimeClass, do-not-disrupt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from scheduler.backends.kubernetes import KubeConfig
from scheduler.backends.kubernetes.reservations import reservationpod, reserve

from .conftest import NS
from .fakeapi import FakeKube

pytestmark = pytest.mark.integration  # starts the reservation program as a process

UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"
MIG = "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d"
ROOT = Path(__file__).resolve().parents[2]


def proc_tree(tmp_path: Path, *uuids: str) -> str:
    for i, u in enumerate(uuids):
        d = tmp_path / f"0000:{i:02x}:00.0"
        d.mkdir()
        (d / "information").write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
            f"GPU UUID: \t {u}\nBus Type: \t PCIe\n"
        )
    return str(tmp_path)


def test_the_uuid_comes_from_the_driver_proc_files(tmp_path: Path) -> None:
    root = proc_tree(tmp_path, UUID)
    # With CDI the variable is not set at all; with volume-mounts it is a path.
    assert reserve.read_gpu_uuid({}, proc_root=root) == UUID
    env = {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert reserve.read_gpu_uuid(env, proc_root=root) == UUID


def test_paths_indices_and_several_gpus_are_refused(tmp_path: Path) -> None:
    empty = str(tmp_path / "none")
    for bad in ("/var/run/nvidia-container-devices", "0", "all", "void", ""):
        with pytest.raises(reserve.NoGpu, match="no single GPU UUID"):
            reserve.read_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": bad}, proc_root=empty)
    two = proc_tree(tmp_path, UUID, UUID.replace("5f", "6f"))
    with pytest.raises(reserve.NoGpu, match="lists 2 GPUs"):
        reserve.read_gpu_uuid({}, proc_root=two)
    assert reserve.read_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": MIG}, proc_root=empty) == MIG


def test_nvml_is_asked_first_and_a_mig_slice_gives_its_own_uuid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: "parent",
        nvmlDeviceGetMigMode=lambda h: (1, 1),
        nvmlDeviceGetMigDeviceHandleByIndex=lambda h, i: "slice",
        nvmlDeviceGetUUID=lambda h: (MIG if h == "slice" else UUID).encode(),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert reserve.read_gpu_uuid({}, proc_root=str(tmp_path)) == MIG
    fake.nvmlDeviceGetCount = lambda: 2
    with pytest.raises(reserve.NoGpu, match="NVML sees 2 GPUs"):
        reserve.read_gpu_uuid({}, proc_root=str(tmp_path))


def test_the_reserver_imports_neither_the_cli_nor_the_kubernetes_client() -> None:
    code = (
        "import sys, scheduler.backends.kubernetes.reservations.reserve; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'typer', 'urllib3', 'pydantic', 'sqlalchemy', 'fastapi', 'yaml')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_the_reserver_publishes_its_uuid_within_its_memory_limit(kube: FakeKube) -> None:
    kube.put("pods", {"metadata": {"name": "res", "namespace": NS}, "spec": {"containers": []}})
    env = {
        **os.environ,
        "POD_NAME": "res",
        "POD_NAMESPACE": NS,
        "NVIDIA_VISIBLE_DEVICES": UUID,
        "SHOAL_KUBE_HOST": kube.url,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.backends.kubernetes.reservations.reserve"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # a loaded machine: generous
        while (kube.obj("pods", "res", NS)["metadata"].get("annotations") or {}).get(
            "shoal.dev/gpu-uuid"
        ) != UUID:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the UUID was not published"
            time.sleep(0.05)
        assert _peak_rss_mib(proc.pid) < KubeConfig().reserve_memory_mib
        assert proc.poll() is None  # it holds the GPU until told to stop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_reservation_pod_spec() -> None:
    cfg = KubeConfig(
        namespace=NS,
        reserve_image_pull_secrets=("regcred",),
        reserve_priority_class="shoal-gpu-reservation",
        reserve_runtime_class="nvidia",
    )
    pod = reservationpod.reservation_pod("n1", 3, cfg)
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "shoal-gpu-reservation"
    assert spec["runtimeClassName"] == "nvidia"
    (c,) = spec["containers"]
    assert c["command"] == ["python", "-m", "scheduler.backends.kubernetes.reservations.reserve"]
    assert c["resources"]["limits"]["memory"] == f"{cfg.reserve_memory_mib}Mi"
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == (
        "false"
    )
    bare = reservationpod.reservation_pod("n1", 3, KubeConfig(namespace=NS))["spec"]
    assert "imagePullSecrets" not in bare and "priorityClassName" not in bare
    # It goes where a share's job went, past any taint that job tolerated (issue 24 item 1).
    assert bare["tolerations"] == [{"operator": "Exists"}]
