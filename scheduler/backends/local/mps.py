"""CUDA MPS on a GPU host Shoal manages: the control daemon, and the limits it enforces.

`start(state_dir, instance)` starts `nvidia-cuda-mps-control -d` with a pipe directory of
its own (or adopts the one a previous `shoal serve` of this state directory left
running), so Shoal's daemon never meets another one on the host. `Daemon.stop()` sends it
`quit`. The local backend (`host.local_backend` makes it) gives each fractional worker
`worker_env(...)`: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its share of the GPU's memory: an
allocation past it fails) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (at least its fraction of
the SMs), which the MPS server enforces whatever the process does. That is why such a
placement reports `enforcement: mps`; without a daemon it is `advisory`.

Where the files go: the log directory is `<state>/mps/log`; the pipe directory (the
control socket every MPS client connects to, so it is in each fractional worker's
environment) is `<tmp>/shoal-mps-<instance>`, outside the state directory: a worker's
environment carries no state-directory path (those hold tokens and other jobs' files),
and a Unix socket's path must stay under 108 bytes, which a deep state directory is not.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scheduler.backends.local import records

log = logging.getLogger("shoal.mps")
CONTROL = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"  # in the pipe directory while the daemon runs


class Unavailable(RuntimeError):
    """No MPS daemon can run here; the message says why (fractions stay advisory)."""


@dataclass(frozen=True)
class Daemon:
    """A running MPS control daemon and its directories."""

    binary: str
    pipe_dir: Path
    log_dir: Path

    def env(self) -> dict[str, str]:
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }

    def running(self) -> bool:
        return daemon_pid(self.pipe_dir) is not None

    def stop(self, timeout_s: float = 10.0) -> None:
        """`quit`: the daemon and its servers exit once their clients have."""
        if not self.running():
            return
        try:
            _control(self.binary, self.env(), "quit\n", timeout_s)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("stopping the MPS daemon (pipe %s) failed: %s", self.pipe_dir, e)
            return
        end = time.monotonic() + timeout_s
        while self.running() and time.monotonic() < end:
            time.sleep(0.1)


def pipe_dir_for(instance: str) -> Path:
    return Path(tempfile.gettempdir()) / f"shoal-mps-{instance}"


def daemon_pid(pipe_dir: Path) -> int | None:
    """The pid of the control daemon serving `pipe_dir`, or None when none runs."""
    try:
        pid = int((pipe_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return pid


def _control(binary: str, env: dict[str, str], stdin: str | None, timeout_s: float) -> str:
    args = [binary] if stdin is not None else [binary, "-d"]
    full = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}  # all GPUs
    # umask 022, not `shoal serve`'s 077: the daemon's pipes are for workers of any user.
    done = subprocess.run(
        args,
        input=stdin,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        umask=0o022,
    )
    if done.returncode != 0:
        raise Unavailable(
            f"{' '.join(args)} exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-300:] or 'no message'}"
        )
    return done.stdout


def start(state_dir: Path, instance: str, *, timeout_s: float = 15.0) -> Daemon:
    """Start (or adopt) this state directory's MPS control daemon; Unavailable if none can run."""
    binary = shutil.which(CONTROL)
    if binary is None:
        raise Unavailable(f"{CONTROL} is not on PATH (it ships with the NVIDIA driver)")
    daemon = Daemon(binary, pipe_dir_for(instance), state_dir / "mps" / "log")
    daemon.pipe_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    daemon.pipe_dir.chmod(0o755)  # `shoal serve`'s umask is 077; workers of any user connect
    daemon.log_dir.mkdir(parents=True, exist_ok=True)
    if daemon.running():
        log.info("adopting the MPS daemon already serving %s", daemon.pipe_dir)
        return daemon
    try:
        _control(binary, daemon.env(), None, timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        raise Unavailable(f"{CONTROL} -d failed: {e}") from None
    end = time.monotonic() + timeout_s
    while not daemon.running():
        if time.monotonic() > end:
            why = _log_tail(daemon)
            raise Unavailable(f"{CONTROL} -d started no daemon within {timeout_s:g}s: {why}")
        time.sleep(0.1)
    return daemon


def _log_tail(daemon: Daemon) -> str:
    try:
        return (daemon.log_dir / "control.log").read_text()[-300:].strip() or "empty log"
    except OSError:
        return "no control.log"


def clients(attempts: Iterable[records.AttemptRecord]) -> int:
    """How many fractional workers of these attempts still run (the daemon's clients)."""
    return sum(
        1 for r in attempts for w in r.workers if w.gpus and w.fraction < 1 and records.alive(w)
    )


def worker_env(daemon: Daemon, fraction: float, gpu_memory_mib: int) -> dict[str, str]:
    """The MPS variables of a worker holding `fraction` of one GPU of `gpu_memory_mib`.
    Device 0 is the worker's one visible GPU (CUDA_VISIBLE_DEVICES names only it)."""
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
        # At least its share of the SMs (MPS takes whole percents, 1..100).
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(
            min(100, max(1, math.ceil(round(fraction * 100, 6))))
        ),
    }
    if gpu_memory_mib > 0:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={max(1, int(fraction * gpu_memory_mib))}M"
    return env
