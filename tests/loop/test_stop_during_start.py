"""A stop that reaches a local worker while its supervisor (the shim) is still starting.

A stop sent in that window (a cancel or maxRuntime right after the launch) used to kill
the shim itself, before it had set its SIGTERM forwarder: the user's process was never
told, ran on until the grace period's SIGKILL, and its exit code was never recorded. Now
the shim sets its handlers before it writes its ledger line, and the backend signals only
shims listed there (a later call tells the others)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends import base
from scheduler.backends.local import LocalBackend
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path)
    yield b
    b.kill_all()
    b.close()


def test_a_stop_right_after_the_launch_still_reaches_the_worker(backend: LocalBackend) -> None:
    spec = JobSpec.model_validate(
        {
            "name": "j",
            "queue": "q",
            "image": "x",
            "command": ["python", "-c", "import time; time.sleep(120)"],
        }
    )
    backend.launch(base.LaunchRequest("early", spec, 1, (WorkerPlacement(0, "node-a", (0,)),)))
    backend.stop("early", 3.0, reason=base.StopReason.CANCELLED)  # at once: no process is up yet

    def ended() -> list[base.WorkerStatus]:
        ws = list(backend.workers())
        return ws if ws and all(w.state is not base.WorkerState.RUNNING for w in ws) else []

    (w,) = eventually(ended, what="the worker to end")
    # Told (SIGTERM, the default action: 128 + 15), and its exit recorded by the shim.
    assert w.exit_code == 143, w
