"""The one process supervision of a worker's command, shared by the worker launcher
(`scheduler.worker.launcher`, every worker's first process) and the local backend's
shim (`scheduler.backends.local.shim`, which outlives the service).

SIGTERM and SIGINT are caught from the moment a `Supervisor` exists, before the command
is started: one that arrives earlier is kept and forwarded once the command runs (with
the default handler it would kill the supervisor and leave the command orphaned, never
told to stop). The command's exit code is reported as a shell and Kubernetes report it:
128 + N when a signal N killed it.
"""

from __future__ import annotations

import signal
import subprocess
from types import FrameType
from typing import Any

FORWARDED = (signal.SIGTERM, signal.SIGINT)


def exit_code(returncode: int) -> int:
    """A `Popen.returncode` as a shell reports it (-N, killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Forwards SIGTERM/SIGINT to the command it starts; made in the main thread (Python
    sets signal handlers there only) before anything that may take a while."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self._pending: list[int] = []
        for signum in FORWARDED:
            signal.signal(signum, self._forward)

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        if self.child is None:
            self._pending.append(signum)  # kept until the command exists
        elif self.child.poll() is None:
            self.child.send_signal(signum)

    def start(self, command: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start the command (`popen`: Popen's arguments); raises what Popen raises.
        Signals that came before are forwarded to it now."""
        self.child = subprocess.Popen(command, **popen)
        for signum in self._pending:
            self._forward(signum, None)
        self._pending.clear()
        return self.child

    def wait(self) -> int:
        """The command's exit code, as a shell reports it."""
        assert self.child is not None, "start() first"
        return exit_code(self.child.wait())
