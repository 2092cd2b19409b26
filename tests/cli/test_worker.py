"""The worker launcher: exit codes, the GPU-fraction environment, progress lines, and
an API that is down."""

from __future__ import annotations

import sys

import pytest

from scheduler.worker import launcher, progress

pytestmark = pytest.mark.integration  # starts the worker launcher as a process


def test_exit_code_and_progress_with_the_api_down(capfd: object) -> None:
    code = (
        "from scheduler.worker import progress; progress.report(step=3, loss=0.5); "
        "import sys; sys.exit(3)"
    )
    env = {"SHOAL_API_URL": "http://127.0.0.1:9", "SHOAL_JOB_ID": "j", "PATH": "/usr/bin"}
    assert launcher.run([sys.executable, "-c", code], env) == 3


def test_fraction_caps_frameworks_through_the_environment() -> None:
    env = launcher.child_env({"SHOAL_GPU_FRACTION": "0.2500", "PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(":") == [str(launcher.SITE_DIR), "/x"]
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2500"
    assert "PYTHONPATH" not in launcher.child_env({})


def test_progress_lines_round_trip() -> None:
    assert progress.parse('w0 SHOAL_PROGRESS {"step": 2, "loss": 0.1}') == {"step": 2, "loss": 0.1}
    assert progress.parse("loss 0.1") is None


def test_sitecustomize_hook_loads_torch_without_cuda() -> None:
    import subprocess

    env = launcher.child_env({"SHOAL_GPU_FRACTION": "0.5"})
    out = subprocess.run(
        [sys.executable, "-c", "import torch, sys; print(type(sys.meta_path[0]).__name__)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
