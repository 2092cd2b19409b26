"""A second `shoal serve` on the same state directory is told, not started silently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.cli.statedir import claim_state

pytestmark = pytest.mark.integration  # starts `shoal serve` as a process

ROOT = Path(__file__).parents[2]


def test_a_held_state_directory_names_its_holder(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "from scheduler.cli.statedir import claim_state\n"
        "assert claim_state(Path(sys.argv[1]), 'http://127.0.0.1:1') is None\n"
        "print('held', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == b"held"
        holder = claim_state(tmp_path, "http://127.0.0.1:2")
        assert holder == f"pid {other.pid} at http://127.0.0.1:1"
    finally:
        other.kill()
        other.wait()
    assert claim_state(tmp_path, "http://127.0.0.1:2") is None  # free once it is gone


def test_serve_refuses_a_state_directory_in_use(tmp_path: Path) -> None:
    from scheduler.cli import serve

    assert claim_state(tmp_path, "http://127.0.0.1:3") is None  # this process holds it
    # flock is per open file: a second claim from this process also sees it held.
    with pytest.raises(SystemExit, match="another `shoal serve`"):
        serve.serve(
            host="127.0.0.1",
            port=1,
            state_dir=str(tmp_path),
            database_url=None,
            cluster=None,
            backend_kind="local",
            policy="fgd",
            interval_s=1.0,
            min_runtime_s=0.0,
        )
