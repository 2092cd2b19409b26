"""A real GPU host as the local backend, with a fake NVML and a fake MPS control daemon:
discovery (models, memory, UUIDs, MIG), what a worker sees (CUDA_VISIBLE_DEVICES by UUID,
its MPS limits), the daemon's life, and "no GPU found" on a host without one."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import fake_nvml
from support.builders import launch_request
from support.wait import eventually

from scheduler.backends import base
from scheduler.backends.local import gpus, host, mps
from scheduler.backends.local.backend import LocalBackend
from scheduler.model import Enforcement, Taint

pytestmark = pytest.mark.integration  # starts local worker processes

FAKE_MPS = Path(__file__).resolve().parents[1] / "support" / "fake_mps"
H200 = {"name": "NVIDIA H200", "uuid": "GPU-11111111-2222", "memoryMiB": 143771}
A100_MIG = {
    "name": "NVIDIA A100-SXM4-40GB",
    "uuid": "GPU-aaaa",
    "memoryMiB": 40960,
    "mig": [
        {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": "MIG-aaaa-1", "memoryMiB": 19968},
        {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": "MIG-aaaa-2", "memoryMiB": 19968},
    ],
}
MIG_EMPTY = {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-bbbb", "memoryMiB": 40960, "mig": []}


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("SHOAL_NVML_MODULE", "support.fake_nvml")
    yield fake_nvml
    fake_nvml.configure(None)


def test_one_h200_is_one_node_with_its_uuid(nvml: Any) -> None:
    nvml.configure({"driver": "580.159.03", "gpus": [H200]})
    found = gpus.discover(nvml, host="box", cpu_milli=16000, memory_mib=131072)
    (node,) = found.nodes
    assert (node.name, node.gpu_count, node.gpu_model, node.gpu_memory_mib) == (
        "box",
        1,
        "NVIDIA-H200",
        143771,
    )
    assert (node.cpu_milli, node.memory_mib) == (16000, 131072)
    assert found.visible("box", [0]) == ["GPU-11111111-2222"]
    assert found.visible("elsewhere", [0]) is None
    assert found.driver == "580.159.03"


def test_mig_devices_are_gpus_of_their_own_and_an_empty_mig_gpu_is_left_out(nvml: Any) -> None:
    nvml.configure({"gpus": [H200, A100_MIG, MIG_EMPTY]})
    found = gpus.discover(nvml, host="box", cpu_milli=30000, memory_mib=300000)
    by_name = {n.name: n for n in found.nodes}
    assert set(by_name) == {"box-nvidia-h200", "box-nvidia-a100-sxm4-40gb-mig-3g.20gb"}
    mig = by_name["box-nvidia-a100-sxm4-40gb-mig-3g.20gb"]
    assert (mig.gpu_count, mig.gpu_memory_mib) == (2, 19968)
    assert found.visible(mig.name, [1]) == ["MIG-aaaa-2"]
    # CPUs and memory split by GPUs (1 of 3, 2 of 3), never counted twice.
    assert sum(n.cpu_milli for n in found.nodes) <= 30000
    assert by_name["box-nvidia-h200"].cpu_milli == 10000
    assert list(found.excluded) == ["box/gpu2"]
    assert "MIG mode with no MIG device" in found.excluded["box/gpu2"]


@pytest.mark.parametrize(
    "config, why",
    [
        ({"gpus": [], "initError": "Driver Not Loaded"}, "NVML did not start (Driver Not Loaded)"),
        ({"gpus": []}, "NVML lists no GPU"),
        ({"gpus": [MIG_EMPTY]}, "MIG mode with no MIG device"),
    ],
    ids=["no-driver", "no-gpu", "only-empty-mig"],
)
def test_no_gpu_found_says_why(nvml: Any, config: dict[str, Any], why: str) -> None:
    nvml.configure(config)
    with pytest.raises(gpus.NoGpu, match=r"^no GPU found") as err:
        gpus.discover(nvml, host="box", cpu_milli=1000, memory_mib=1000)
    assert why in str(err.value)


def test_gpus_auto_without_a_gpu_stops_unless_a_fallback_is_asked_for(
    nvml: Any, tmp_path: Path
) -> None:
    nvml.configure({"gpus": [], "initError": "Driver Not Loaded"})
    with pytest.raises(host.NoGpuHost, match=r"no GPU found.*--fallback-simulated"):
        host.local_backend(tmp_path, cluster_file=None, gpus_auto=True)
    b = host.local_backend(tmp_path, cluster_file=None, gpus_auto=True, fallback_simulated=True)
    try:
        assert [n.name for n in b.nodes()] == ["node-a", "node-b"]  # the simulated default
    finally:
        b.close()


def test_nvml_bindings_missing_is_no_gpu_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_NVML_MODULE", "no_such_nvml_module")
    with pytest.raises(gpus.NoGpu, match="no GPU found: the NVML bindings"):
        host.discover({})


def test_a_cluster_file_node_with_gpus_auto_is_this_host(nvml: Any, tmp_path: Path) -> None:
    nvml.configure({"gpus": [H200, H200 | {"uuid": "GPU-second"}]})
    f = tmp_path / "cluster.yaml"
    f.write_text("nodes:\n  - name: lab-box\n    gpus: auto\n    cpu: 12\n    memory: 100Gi\n")
    b = host.local_backend(tmp_path / "state", cluster_file=str(f), gpus_auto=False, use_mps=False)
    try:
        (node,) = b.nodes()
        assert (node.name, node.gpu_count, node.cpu_milli, node.memory_mib) == (
            "lab-box",
            2,
            12000,
            102400,
        )
        assert node.enforcement is Enforcement.ADVISORY
    finally:
        b.close()
    f.write_text("nodes:\n  - {name: a, gpus: auto}\n  - {name: b, gpus: 2}\n")
    with pytest.raises(ValueError, match="must be the only node"):
        host.local_backend(tmp_path / "state", cluster_file=str(f), gpus_auto=False)


def _env_of(
    backend: LocalBackend, out: Path, gpu: float | None, worker_gpus: tuple[int, ...]
) -> dict[str, str]:
    """Launch one worker on the first node that dumps its environment to `out`; returns it."""
    node = backend.nodes()[0].name
    req = launch_request(out.stem, gpu=gpu, node_of=lambda i: node, gpus_of=lambda i: worker_gpus)
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    spec = req.spec.model_copy(update={"command": [sys.executable, "-c", code], "args": []})
    backend.launch(base.LaunchRequest(req.job_id, spec, 0, req.placements))
    eventually(out.exists, 30, what="the worker to write its environment")
    env: dict[str, str] = json.loads(out.read_text())
    return env


@pytest.fixture
def fake_mps_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_MPS}{os.pathsep}{os.environ['PATH']}")


def test_workers_see_only_their_gpu_and_fractions_get_mps_limits(
    nvml: Any, tmp_path: Path, fake_mps_path: None
) -> None:
    nvml.configure({"gpus": [H200, H200 | {"uuid": "GPU-second"}]})
    state = tmp_path / "state"
    work = tmp_path / "out"
    work.mkdir()
    b = host.local_backend(state, cluster_file=None, gpus_auto=True, use_mps=True)
    try:
        assert b.mps is not None and b.mps.running()
        assert [n.enforcement for n in b.nodes()] == [Enforcement.MPS]
        # The daemon sees every GPU, whatever the service's own CUDA_VISIBLE_DEVICES.
        assert "-d CUDA_VISIBLE_DEVICES=(unset)" in (b.mps.pipe_dir / "commands.log").read_text()
        quarter = _env_of(b, work / "quarter.json", 0.25, (1,))
        assert quarter["CUDA_VISIBLE_DEVICES"] == "GPU-second"
        assert quarter["NVIDIA_VISIBLE_DEVICES"] == "GPU-second"
        assert quarter["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={int(0.25 * 143771)}M"
        assert quarter["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert quarter["CUDA_MPS_PIPE_DIRECTORY"] == str(b.mps.pipe_dir)
        assert (quarter["SHOAL_GPU_FRACTION"], quarter["SHOAL_GPU_ENFORCEMENT"]) == (
            "0.2500",
            "mps",
        )
        whole = _env_of(b, work / "whole.json", 1, (0,))
        assert whole["CUDA_VISIBLE_DEVICES"] == "GPU-11111111-2222"
        assert not any(k.startswith("CUDA_MPS_") for k in whole)  # a whole GPU: no MPS
        cpu = _env_of(b, work / "cpu.json", None, ())
        assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["NVIDIA_VISIBLE_DEVICES"] == "void"
        # No variable names a path of the state directory: not the devices, not the MPS
        # pipe, not the stop files (tests/backends/test_worker_users.py: the hostfile).
        assert quarter["SHOAL_STOP_FILE"] and quarter["SHOAL_PREEMPT_FILE"]
        assert not [(k, v) for e in (quarter, whole, cpu) for k, v in e.items() if str(state) in v]
    finally:
        b.close()
    assert b.mps is not None and not b.mps.running()  # no fractional worker left: stopped


def test_the_mps_daemon_outlives_a_restart_while_fractions_run(
    nvml: Any, tmp_path: Path, fake_mps_path: None
) -> None:
    nvml.configure({"gpus": [H200]})
    state = tmp_path / "state"
    b = host.local_backend(state, cluster_file=None, gpus_auto=True)
    req = launch_request(
        "sleeper", gpu=0.5, node_of=lambda i: b.nodes()[0].name, gpus_of=lambda i: (0,)
    )
    spec = req.spec.model_copy(
        update={"command": [sys.executable, "-c", "import time; time.sleep(60)"], "args": []}
    )
    b.launch(base.LaunchRequest(req.job_id, spec, 0, req.placements))
    assert b.mps is not None
    daemon = b.mps
    b.close()
    try:
        assert daemon.running()  # a fractional worker still uses it
        again = host.local_backend(state, cluster_file=None, gpus_auto=True)
        assert again.mps == daemon  # adopted, not a second daemon
        again.kill_all()
        eventually(
            lambda: not any(w.state == base.WorkerState.RUNNING for w in again.workers()), 10
        )
        again.close()
        assert not daemon.running()
    finally:
        daemon.stop()


def test_without_an_mps_daemon_fractions_stay_advisory(
    nvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    nvml.configure({"gpus": [H200]})
    b = host.local_backend(tmp_path / "state", cluster_file=None, gpus_auto=True)
    try:
        assert b.mps is None and "nvidia-cuda-mps-control is not on PATH" in b.mps_unavailable
        assert b.nodes()[0].enforcement is Enforcement.ADVISORY
    finally:
        b.close()


def test_mps_limits_for_a_fraction() -> None:
    d = mps.Daemon("x", Path("/tmp/p"), Path("/tmp/l"))
    assert mps.worker_env(d, 0.25, 80 * 1024)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert mps.worker_env(d, 0.333, 1000)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "34"
    assert mps.worker_env(d, 0.001, 1000)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "1"


def test_the_gpus_auto_node_takes_labels_and_taints(nvml: Any, tmp_path: Path) -> None:
    nvml.configure({"gpus": [H200]})
    f = tmp_path / "cluster.yaml"
    f.write_text(
        "nodes:\n  - {name: lab-box, gpus: auto, labels: {lab: vision},"
        " taints: [{key: reserved, effect: PreferNoSchedule}]}\n"
    )
    b = host.local_backend(tmp_path / "state", cluster_file=str(f), gpus_auto=False, use_mps=False)
    try:
        (node,) = b.nodes()
        assert node.labels == {"kubernetes.io/hostname": "lab-box", "lab": "vision"}
        assert node.taints == (Taint("reserved", "", "PreferNoSchedule"),)
    finally:
        b.close()
    f.write_text("nodes:\n  - {name: lab-box, gpus: auto, taints: [{key: k, effect: No}]}\n")
    with pytest.raises(ValueError, match=r"^lab-box \(gpus: auto\): taints\[0\].effect: must"):
        host.local_backend(tmp_path / "state", cluster_file=str(f), gpus_auto=False)
