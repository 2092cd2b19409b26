"""A share's check-in (scheduler/worker/checkin.py) on a real GPU host: with this host's
real device nodes and NVML, a share named by a real GPU's UUID passes (as it would in a
container the NVIDIA runtime gave that GPU), and one named by a UUID no GPU here has
fails. Skipped without a GPU (conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from scheduler.worker import checkin

from .conftest import nvidia_smi

BOGUS = "GPU-00000000-0000-0000-0000-000000000000"


def share(uuid: str) -> dict[str, str]:
    return {
        checkin.RESERVATION_ENV: "shoal-gpu-host-g0",
        "SHOAL_GPU_FRACTION": "0.5000",
        "NVIDIA_VISIBLE_DEVICES": uuid,
    }


def test_a_share_named_by_a_real_gpu_sees_it_and_a_bogus_one_does_not() -> None:
    gpu = nvidia_smi()[0]
    assert checkin.device_nodes(), "a GPU host without /dev/nvidia<N>"
    seen = checkin.nvml_uuids()
    assert seen is not None and gpu.uuid in seen, seen
    began = time.monotonic()
    assert checkin.problem(share(gpu.uuid)) is None
    took = time.monotonic() - began
    assert took < 5.0, f"the check-in took {took:.1f}s"  # no CUDA init: NVML only
    said = checkin.problem(share(BOGUS))
    assert said is not None and said.startswith(checkin.PREFIX) and gpu.uuid in said, said


def test_the_launcher_runs_a_share_that_sees_its_gpu() -> None:
    gpu = nvidia_smi()[0]
    code = "import sys; sys.exit(0)"
    env = {**share(gpu.uuid), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.worker", "--", sys.executable, "-c", code],
        env={**env, "PYTHONPATH": ":".join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
