"""The API process of plain `shoal serve` (`--role all`, local backend): the API runs in
a child process of the scheduler's, so the two no longer share one GIL (in one process,
POST /jobs waited behind the loop's cycles: docs/benchmarks.md, issue 39).

The parent stays the scheduler: the backend (local workers are its children), the loop,
the estimator; crash points and a `kill -9` end it. It binds the port and starts this
module (`python -m scheduler.cli.apiproc`) with, by descriptor, the listening socket, the
loop's pulse and the channel its metric families come through (`scheduler.cli.loopshare`);
by environment, what `--role api` reads (`apirole.role_environment`) and, in `CONFIG_VAR`,
what the API took from the backend and the loop in one process (`Handover`). The app is
the API role's (`apirole.app_from_env`) with those parts: worker logs read from the state
directory, the local backend's spec refusals (allowed host paths), its excluded GPUs, the
team-token refusal, /healthz from the pulse, the loop's series on /metrics. Writes wake
the loop through the database (`scheduler.store.wakeup`), as with `--role api`.

It dies with its parent (PR_SET_PDEATHSIG, and a watch on its parent's pid elsewhere than
Linux): a parent killed -9 leaves nothing holding the port for its successor. Ctrl-C
reaches both (one process group): this one ignores SIGINT, and its parent stops it with
SIGTERM once it stops itself; if it dies first, its parent stops too (`Supervised`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType

import uvicorn

from api.services import Wiring
from scheduler.backends.kubernetes import names
from scheduler.backends.local import statedir, volumes
from scheduler.cli import apirole
from scheduler.cli.connguard import GuardedH11
from scheduler.cli.loopshare import Pulse, RemoteSeries
from scheduler.spec import JobSpec

CONFIG_VAR = "SHOAL_API_PROCESS"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_S = 10.0  # how long the API process gets to finish its requests before SIGKILL


@dataclass(frozen=True)
class Handover:
    """What the API took from the backend and the loop in one process, as JSON travels."""

    state_dir: str  # the workers' logs are under it (`statedir.log_files`)
    allowed_host_paths: tuple[str, ...]  # the local backend's spec refusals
    excluded_nodes: dict[str, str]  # this host's GPUs not offered, with why (fixed at start)
    team_tokens_refused: str | None
    stall_s: float  # /healthz: the longest one cycle may run
    # Kubernetes: the namespaces Shoal runs jobs in (its spec refusals); there are no
    # worker log files (`kubectl logs`), and the nodes it excludes are the stored
    # inventory's, as with `--role api`. None: the local backend.
    job_namespaces: tuple[str, ...] | None = None


class StateDirLogs:
    """`base.WorkerLogs` without the backend: the files are the state directory's."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return statedir.log_files(self.state_dir, job_id)


class HostPathRefusals:
    """`base.SpecRefusals` of the local backend, without it (`volumes.refusals`)."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed

    def spec_refusals(self, spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
        return volumes.refusals(spec, self.allowed)


class NamespaceRefusals:
    """`base.SpecRefusals` of the Kubernetes backend, without it."""

    def __init__(self, given: tuple[str, ...]) -> None:
        self.given = given

    def spec_refusals(self, spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
        return names.namespace_refusals(spec, self.given)


class Supervised:
    """The parent's handle on its API process."""

    def __init__(
        self,
        sock: socket.socket,
        role_env: dict[str, str],
        handover: Handover,
        pulse: Pulse,
        series: socket.socket,
    ) -> None:
        """Start it. From the main thread: the death signal follows the thread that
        forked, not the process."""
        fds = {"socket": sock.fileno(), "pulse": pulse.fd, "series": series.fileno()}
        config = {**asdict(handover), "fds": fds, "parent": os.getpid()}
        env = {**os.environ, **role_env, CONFIG_VAR: json.dumps(config)}
        cmd = [sys.executable, "-m", "scheduler.cli.apiproc"]
        self.proc = subprocess.Popen(cmd, env=env, pass_fds=tuple(fds.values()))
        series.close()  # the child's end now

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self) -> int:
        """Its exit status, once it ends (a signal interrupts the wait: Ctrl-C)."""
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Server(uvicorn.Server):
    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Ctrl-C reaches the whole process group: the parent stops this one with SIGTERM
        # after the loop, in order, so the API answers until then.
        if sig != signal.SIGINT:
            super().handle_exit(sig, frame)


def _die_with(parent: int) -> None:
    """Exit when `parent` does: SIGKILL from the kernel on Linux, else a watch."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the watch alone
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the prctl
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    config = json.loads(os.environ.pop(CONFIG_VAR))
    _die_with(int(config["parent"]))
    fds = config["fds"]
    handover = Handover(
        state_dir=config["state_dir"],
        allowed_host_paths=tuple(config["allowed_host_paths"]),
        excluded_nodes=dict(config["excluded_nodes"]),
        team_tokens_refused=config["team_tokens_refused"],
        stall_s=float(config["stall_s"]),
        job_namespaces=(
            tuple(config["job_namespaces"]) if config["job_namespaces"] is not None else None
        ),
    )
    pulse = Pulse(fds["pulse"], writable=False)

    def adapt(wiring: Wiring) -> Wiring:
        wiring = replace(
            wiring,
            loop_health=pulse.health(handover.stall_s),
            team_tokens_refused=handover.team_tokens_refused,
            loop_series=RemoteSeries(fds["series"]),
        )
        if handover.job_namespaces is not None:  # Kubernetes
            return replace(wiring, spec_refusals=NamespaceRefusals(handover.job_namespaces))
        return replace(
            wiring,
            log_source=StateDirLogs(Path(handover.state_dir)),
            spec_refusals=HostPathRefusals(handover.allowed_host_paths),
            excluded_nodes=lambda: dict(handover.excluded_nodes),
        )

    app = apirole.app_from_env(adapt)
    sock = socket.socket(fileno=fds["socket"])
    _Server(uvicorn.Config(app, http=GuardedH11, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
