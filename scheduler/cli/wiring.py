"""What `shoal serve` wires together besides the API: the backend (and, on Kubernetes,
the runtime's Lease and leader tasks), who this replica is, whether it may start beside
another, how /healthz tells a wedged loop, when team tokens are refused, and the
middleware by which writes through the API wake the loop."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.backends import base
from scheduler.backends.local import host, ownuser, users
from scheduler.cli import settings as serve_settings
from scheduler.loop.service import Loop
from scheduler.spec.allowed import Allowances
from scheduler.store.db import Database
from scheduler.store.lease import lease_holder

log = logging.getLogger("shoal.serve")


# Writes through the API wake the loop at most this often (the rest are merged).
WAKE_GAP_S = 0.25


class WakeOnWrite:
    """ASGI middleware: a successful write through the API wakes the loop (`wake`: the
    loop's own in one process, `scheduler.store.wakeup.Notifier`'s through the database
    with `--role api`), at once unless the last wake was under `min_gap_s` ago; then one
    wake at the end of the gap stands for all the writes inside it. Every cycle scans the
    live set and runs the core on all of it, so one wake per submission under a burst made
    the loop take most of the process's CPU (docs/benchmarks.md). `wake` must not block:
    it runs on the event loop."""

    def __init__(
        self, app: ASGIApp, wake: Callable[[], None], min_gap_s: float = WAKE_GAP_S
    ) -> None:
        self.app, self.wake, self.min_gap_s = app, wake, min_gap_s
        self._last = -math.inf
        self._deferred = False

    def _wake(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.min_gap_s:
            self._last = now
            self.wake()
        elif not self._deferred:
            self._deferred = True
            asyncio.get_running_loop().call_later(self._last + self.min_gap_s - now, self._later)

    def _later(self) -> None:
        self._deferred = False
        self._last = time.monotonic()
        self.wake()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return

        async def send_and_wake(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.start" and message["status"] < 400:
                self._wake()

        await self.app(scope, receive, send_and_wake)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Wired:
    """What `make_backend` wires: the backend the loop drives, how to stop it and what
    came with it (the Kubernetes runtime's elector and leader tasks), and who leads
    (the runtime's Lease; None: this replica, under the store's lease alone)."""

    backend: base.ClusterBackend
    close: Callable[[], None]
    is_leader: Callable[[], bool] | None = None


def make_backend(
    kind: serve_settings.BackendKind,
    state: Path,
    cluster: str | None,
    wake: Any,
    *,
    env: serve_settings.ServeSettings | None = None,
    database: Database | None = None,
    gpus: str | None = None,
    fallback_simulated: bool = False,
    worker_user: str | None = None,
    shared_user_ok: bool = False,
    chart_limits: Allowances | None = None,
) -> Wired:
    """`gpus="auto"` (local only): this host's GPUs through NVML, not the simulated cluster.
    `worker_user` (local only) over the cluster file's `workerUser`: who runs workers;
    with neither, as root, its own `shoal-worker` (`ownuser`), unless `shared_user_ok`
    keeps them as this process's user."""
    if gpus not in (None, "auto"):
        raise SystemExit(f"--gpus {gpus!r}: the only value is auto (this host's GPUs)")
    if kind is serve_settings.BackendKind.LOCAL:
        try:
            own = None if shared_user_ok else ownuser.own_worker_user
            worker_users = users.resolve(cluster, worker_user, own=own)
            ownuser.warn_of_configured(worker_users)
            local = host.local_backend(
                state,
                cluster_file=cluster,
                gpus_auto=gpus == "auto",
                fallback_simulated=fallback_simulated,
                on_change=wake,
                users=worker_users,
            )
            local.run.ensure()  # a run directory someone else made stops the service now
            return Wired(local, local.close)
        except (host.NoGpuHost, ValueError, RuntimeError) as e:
            raise SystemExit(str(e)) from None
    if gpus is not None:
        raise SystemExit("--gpus auto is for the local backend (Kubernetes reads its nodes)")
    if worker_user is not None:
        raise SystemExit(
            "--worker-user is for the local backend (a pod's user is its securityContext's)"
        )
    # The Kubernetes backend. Imported here: only these pull in the `kubernetes` client.
    from scheduler.backends.kubernetes import runtime
    from scheduler.controller import watcher

    # The CR watcher (TrainingJob/Queue controller) runs in the leader only.
    tasks = (
        [watcher.leader_task(database.session, resync_s=30, chart_limits=chart_limits)]
        if database
        else []
    )
    try:
        kube = runtime.from_settings(
            env or serve_settings.from_env(),
            leader_tasks=tasks,
            on_leader_change=lambda _leading: wake(),
            on_change=wake,  # a foreign pod waits: cycle now, not after the interval
        )
        return Wired(kube.backend, kube.close, kube.is_leader)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def loop_health(loop: Loop, thread: threading.Thread, stall_s: float) -> Callable[[], str | None]:
    """What /healthz asks: None while the loop cycles, else why it does not. A loop stuck
    in one cycle (an API call or a lock that never returns) or a dead loop thread leaves
    the API answering and nothing scheduled; failing liveness lets the kubelet restart it."""

    def check() -> str | None:
        return loop_problem(alive=thread.is_alive(), heartbeat=loop.heartbeat, stall_s=stall_s)

    return check


def loop_problem(*, alive: bool, heartbeat: float, stall_s: float) -> str | None:
    """Why a loop whose thread is `alive` and whose last cycle began at `heartbeat`
    (monotonic) is unhealthy, or None; in this process (`loop_health`) or another
    (`scheduler.cli.loopshare`)."""
    if not alive:
        return "scheduler loop stopped: its thread has exited"
    age = time.monotonic() - heartbeat
    if age > stall_s:
        return f"scheduler loop stalled: one cycle has run {age:.0f}s (limit {stall_s:g}s)"
    return None


def lease_identity(state: Path, *, pod_name: str | None, owns_state: bool) -> str:
    """Who holds the store's lease: the same after a restart, so it takes its lease back at once.

    A pod name, else this host and the state directory, when this process holds the state
    directory's lock (a SIGKILLed predecessor's lock is gone, so its successor has it). A
    second process on a locked directory gets its pid: two holders must never share a name.
    """
    if pod_name:
        return f"serve-{pod_name}"
    if owns_state:
        return f"serve-{socket.gethostname()}:{state}"
    return f"serve-{os.getpid()}"


def refuse_second_local_replica(database: Database, holder: str) -> None:
    """The local backend supports one replica per database: its workers are processes of
    one host and state directory, which another replica can neither see nor stop, so after
    a failover it would launch them again. Refused while another scheduler leads."""
    with database.session() as session:
        other = lease_holder(session=session)
    if other is not None and other != holder:
        raise SystemExit(
            f"another scheduler ({other}) leads this database. The local backend supports one "
            "replica per database: its workers are local processes that another replica can "
            "neither see nor stop, so a failover would run them twice. Stop the other one, "
            "or run several replicas with --backend kubernetes"
        )


def team_refusal(worker_users: users.WorkerUsers | None, *, shared_user_ok: bool) -> str | None:
    """Why team tokens are refused here (the API's 403), or None. Only the local backend
    runs workers as OS users of this host (its `users`; None for any other backend);
    `shared_user_ok`: one trusted team, accepted."""
    if worker_users is None:
        return None
    why = worker_users.shared_reason()
    if why is None:
        who = sorted({u.name for u in (worker_users.default, *worker_users.queues.values()) if u})
        own = " (its own worker user: no workerUser is set)" if worker_users.own else ""
        log.info("workers run as %s, apart from the state directory%s", ", ".join(who), own)
        return None
    if shared_user_ok:
        log.warning("--shared-user-ok: team tokens accepted although %s", why.split(": ", 1)[1])
        return None
    log.warning("%s", why)
    return why
