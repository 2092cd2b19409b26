"""Issue 35: a start-time forecast process outlived its SIGKILLed server (found 42 min
later, parent 1). The estimator's parent here is a process of its own that makes one
forecast in the estimator's process and waits; once it is SIGKILLed, every process it
started (the forecast's, and multiprocessing's resource tracker) must end by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends.local import records

pytestmark = pytest.mark.integration

PARENT = """
import sys, time
from scheduler import model
from scheduler.loop.estimator import Estimator, EstimatorConfig
from scheduler.store.db import open_database

estimator = Estimator(open_database(sys.argv[1]), EstimatorConfig(subprocess=True))
estimator.observe(type("Report", (), {"snapshot": model.Snapshot(nodes=(), queues=())})())
assert estimator.run_once()  # a forecast made in the estimator's process
print("forecast made", flush=True)
time.sleep(3600)
"""


def _children(pid: int) -> dict[int, int | None]:
    """The live processes whose parent is `pid`: pid -> start time (clock ticks)."""
    found: dict[int, int | None] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found[int(entry.name)] = records.start_ticks(int(entry.name))
    return found


def _gone(pid: int, ticks: int | None) -> bool:
    """Ended (a zombie counts: nothing of it runs), or its pid taken by another process."""
    now = records.start_ticks(pid)
    return now is None or now != ticks


def test_the_forecast_process_ends_with_its_killed_parent(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, db], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line == b"forecast made\n", (line, parent.stderr.read() if parent.stderr else "")
        children = _children(parent.pid)
        assert children, "the forecast ran in a process of its own"
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    try:
        eventually(
            lambda: all(_gone(pid, ticks) for pid, ticks in children.items()),
            what=f"the processes of the killed estimator's parent end: {children}",
        )
    finally:  # a failure leaves no orphan of this test behind
        for pid, ticks in children.items():
            if not _gone(pid, ticks):
                os.kill(pid, signal.SIGKILL)
