"""A share's check-in (scheduler/worker/checkin.py): when the worker launcher checks that
a fractional worker sees its reservation's GPU, and what it decides, over a fake /dev
(a tmp dir) and the fake pynvml (tests/support/fake_nvml.py) in place of the driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import fake_nvml

from scheduler.worker import checkin, launcher

UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"
OTHER = "GPU-6f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f71"
MIG = "MIG-0d7e1e5a-9f00-5c3a-8b4e-1a2b3c4d5e6f"
GPU_NODES = ("nvidiactl", "nvidia-uvm", "nvidia0")
SHARE = {
    "SHOAL_GPU_RESERVATION": "shoal-gpu-n1-g0",
    "SHOAL_GPU_FRACTION": "0.5000",
    "NVIDIA_VISIBLE_DEVICES": UUID,
}


def gpu(uuid: str, *migs: str) -> dict[str, Any]:
    g: dict[str, Any] = {"name": "NVIDIA A100", "uuid": uuid, "memoryMiB": 40960}
    if migs:
        g["mig"] = [{"name": "1g.5gb", "uuid": m, "memoryMiB": 4864} for m in migs]
    return g


# (id, env over SHARE (None: drop it), device nodes in /dev, NVML: None (no pynvml),
#  "init-fails", or the GPUs it lists) -> None (goes on) or a phrase of the failure.
CASES = [
    ("not-a-share: whole GPU, local backend", {"SHOAL_GPU_RESERVATION": None}, (), None, None),
    ("no fraction", {"SHOAL_GPU_FRACTION": None}, (), None, None),
    ("variable unset", {"NVIDIA_VISIBLE_DEVICES": None}, (), None, None),
    ("variable void", {"NVIDIA_VISIBLE_DEVICES": "void"}, (), None, None),
    ("variable all", {"NVIDIA_VISIBLE_DEVICES": "all"}, (), None, None),
    ("variable an index", {"NVIDIA_VISIBLE_DEVICES": "0"}, (), None, None),
    ("two uuids", {"NVIDIA_VISIBLE_DEVICES": f"{UUID},{OTHER}"}, (), None, None),
    ("job opted out", {"SHOAL_SHARE_CHECK": "off"}, (), None, None),
    ("its init container checked", {"SHOAL_SHARE_CHECKED": "share-check"}, (), None, None),
    ("no device node", {}, (), None, "but no {dev}/nvidia<N> device"),
    ("control nodes only", {}, ("nvidiactl", "nvidia-uvm", "nvidia-caps"), None, "no {dev}/"),
    ("no device, NVML would list it", {}, (), [gpu(UUID)], "no {dev}/nvidia<N>"),
    ("device, no pynvml", {}, GPU_NODES, None, None),
    ("device, NVML does not start", {}, GPU_NODES, "init-fails", None),
    ("device, NVML lists it", {}, GPU_NODES, [gpu(UUID)], None),
    ("device, NVML lists another", {}, GPU_NODES, [gpu(OTHER)], f"NVML lists {OTHER} here"),
    ("device, NVML lists none", {}, GPU_NODES, [], "NVML lists no GPU here"),
    ("privileged: every GPU", {}, (*GPU_NODES, "nvidia1"), [gpu(OTHER), gpu(UUID)], None),
    (
        "CDI name, seen",
        {"NVIDIA_VISIBLE_DEVICES": f"runtime.nvidia.com/gpu={UUID}"},
        GPU_NODES,
        [gpu(UUID)],
        None,
    ),
    (
        "CDI name, no device",
        {"NVIDIA_VISIBLE_DEVICES": f"runtime.nvidia.com/gpu={UUID}"},
        (),
        None,
        f"NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu={UUID}",
    ),
    ("MIG slice, listed", {"NVIDIA_VISIBLE_DEVICES": MIG}, GPU_NODES, [gpu(OTHER, MIG)], None),
    # NVML that lists no MIG device cannot tell which slice this is: not a failure.
    ("MIG slice, no MIG listing", {"NVIDIA_VISIBLE_DEVICES": MIG}, GPU_NODES, [gpu(OTHER)], None),
    (
        "MIG slice, another listed",
        {"NVIDIA_VISIBLE_DEVICES": MIG},
        GPU_NODES,
        [gpu(OTHER, MIG.replace("0d", "1d"))],
        "NVML lists",
    ),
]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a pynvml for the check to import: None (not installed) or fake_nvml."""

    def use(listing: Any) -> None:
        if listing is None:
            monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
            return
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
        if listing == "init-fails":
            fake_nvml.configure({"gpus": [], "initError": "Driver Not Loaded"})
        else:
            fake_nvml.configure({"gpus": listing})

    yield use
    fake_nvml.configure(None)


@pytest.mark.parametrize(
    ("over", "nodes", "listing", "fails"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_when_a_share_is_checked_and_what_fails_it(
    tmp_path: Path,
    nvml: Any,
    over: dict[str, str | None],
    nodes: tuple[str, ...],
    listing: Any,
    fails: str | None,
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in nodes:
        (dev / name).touch()
    nvml(listing)
    env = {k: v for k, v in {**SHARE, **over}.items() if v is not None}
    said = checkin.problem(env, dev=str(dev))
    if fails is None:
        assert said is None
    else:
        assert said is not None and said.startswith(checkin.PREFIX + ": "), said
        assert fails.format(dev=dev) in said, said
        assert "GPU reservation shoal-gpu-n1-g0" in said


def test_a_share_that_sees_no_gpu_says_why_in_the_termination_log(
    tmp_path: Path, nvml: Any
) -> None:
    nvml(None)
    log = tmp_path / "termination-log"
    env = {**SHARE, "SHOAL_TERMINATION_LOG": str(log)}
    assert checkin.check(env, dev=str(tmp_path)) == checkin.NO_GPU_EXIT
    text = log.read_text()
    assert text.startswith(f"share sees no GPU: NVIDIA_VISIBLE_DEVICES={UUID} (GPU reservation")
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in text
    assert "workerRuntimeClassName" in text
    # Seen: nothing written, the command goes on.
    (tmp_path / "nvidia0").touch()
    log.unlink()
    assert checkin.check(env, dev=str(tmp_path)) is None and not log.exists()


@pytest.mark.skipif(bool(checkin.device_nodes()), reason="this host has GPU device nodes")
def test_the_launcher_checks_in_before_it_runs_the_command(tmp_path: Path, nvml: Any) -> None:
    """On this host (no /dev/nvidia<N>) a share's command never starts; a worker that is
    not a share runs as before."""
    nvml(None)
    ran, log = tmp_path / "ran", tmp_path / "termination-log"
    command = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    env = {**SHARE, "SHOAL_TERMINATION_LOG": str(log), "PATH": "/usr/bin"}
    assert launcher.run(command, env) == checkin.NO_GPU_EXIT
    assert not ran.exists() and log.read_text().startswith(checkin.PREFIX)
    del env["SHOAL_GPU_RESERVATION"]
    assert launcher.run(command, env) == 0 and ran.exists()
    # Checked by the pod's init container already: the launcher does not check again.
    env = {**SHARE, checkin.CHECKED_ENV: "share-check", "PATH": "/usr/bin"}
    assert launcher.run(command, env) == 0


@pytest.mark.skipif(bool(checkin.device_nodes()), reason="this host has GPU device nodes")
def test_the_init_containers_command_checks_alone(tmp_path: Path) -> None:
    """`python -m scheduler.worker.checkin` as a share pod's init container runs it: exit
    75 and the termination message here (no /dev/nvidia<N>), 0 for a worker that is not
    checked; it starts without torch, the kubernetes client or httpx (Shoal's image
    runs it before the job's command, and must start fast)."""
    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "termination-log"
    env = {**SHARE, "SHOAL_TERMINATION_LOG": str(log), "PYTHONPATH": str(root)}
    env["PATH"] = os.environ.get("PATH", "/usr/bin")
    command = [sys.executable, "-X", "importtime", "-m", "scheduler.worker.checkin"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == checkin.NO_GPU_EXIT, done.stderr[-2000:]
    assert log.read_text().startswith(f"{checkin.PREFIX}: NVIDIA_VISIBLE_DEVICES={UUID}")
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "scheduler" in imported  # the listing is real
    assert not imported & {"torch", "kubernetes", "httpx", "sqlalchemy", "fastapi"}, imported
    del env["SHOAL_GPU_RESERVATION"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
