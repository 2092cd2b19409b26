"""Crash points for the fault-injection tests.

`point(name)` is called at every step of the loop where a crash could leave store and
cluster disagreeing. With SHOAL_FAULT_AT=N the process SIGKILLs itself at the N-th point
it reaches (counted from process start), as abruptly as a node losing power; with
SHOAL_FAULT_LOG=path every point reached is appended there, so a test can see how many
points a schedule has. Without those variables a point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

_count = 0


def point(name: str) -> None:
    global _count
    at = os.environ.get("SHOAL_FAULT_AT")
    log = os.environ.get("SHOAL_FAULT_LOG")
    if at is None and log is None:
        return
    _count += 1
    if log:
        with open(log, "a") as f:
            f.write(f"{_count} {name}\n")
    if at is not None and _count == int(at):
        os.kill(os.getpid(), signal.SIGKILL)
