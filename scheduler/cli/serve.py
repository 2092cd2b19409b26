"""`shoal serve`: the whole service under one command - the API (uvicorn) and the
scheduler loop (a thread) on one store, with the local backend by default, the API in a
child process of its own (`scheduler.cli.apiproc`: the loop no longer holds the GIL its
requests wait for, nor the kubernetes backend's launch threads); or, with `--role api` /
`--role scheduler` (`scheduler.cli.roles`), one half of it: the API alone
(`scheduler.cli.apirole`), or the backend and the loop with probes on the port
(`scheduler.cli.probes`), woken by the API's writes through the database.

Configuration comes from flags and, as the Helm chart sets them, SHOAL_* variables
(`scheduler.cli.settings`: policy file, tokens file, Kubernetes settings, leader
election); `--backend kubernetes` runs `scheduler.backends.kubernetes.runtime`, whose
leader election gates the loop. Without a tokens file, on first start it creates, in
the state directory (default var/shoal): `shoal.db` (SQLite), `admin-token` (random;
the CLI reads it from here), `worker-key` (signs per-job worker tokens), `tokens.yaml`
for the API, and `url`. Workers get SHOAL_API_URL and a token of their own job
(`scheduler.workertoken`), good only to report that job's progress. Stopping the server
leaves running workers alone; the next start adopts them (see docs/loop.md). A second
server on the same state directory is refused (local backend) or warned about.

The state directory is the service's alone (`statedir.secure`). With the local backend
workers run as `--worker-user` / the cluster file's `workerUser` (when this is root), or
with neither as its own `shoal-worker` (`scheduler.backends.local.ownuser`); where they
would run as the service's own user, team tokens are refused with the reason, unless
`--shared-user-ok` accepts that, which also keeps them as its own user (docs/gpu.md,
"Sharing one box between teams").
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from api.auth import TokenTable
from api.metrics import Metrics
from scheduler.backends import base
from scheduler.backends.local import LocalBackend
from scheduler.cli import apiproc, apirole, listen, roles, servesetup
from scheduler.cli import settings as serve_settings
from scheduler.cli.connguard import GuardedH11
from scheduler.cli.loopshare import Pulse, beat, serve_series
from scheduler.cli.probes import probe_app
from scheduler.cli.roles import Role
from scheduler.cli.statedir import secure
from scheduler.cli.wiring import (
    Wired,
    lease_identity,
    loop_health,
    make_backend,
    refuse_second_local_replica,
    team_refusal,
)
from scheduler.loop.estimator import Estimator, EstimatorConfig
from scheduler.loop.service import Loop, LoopConfig
from scheduler.loop.workerenv import ScopedWorkerEnv
from scheduler.spec.allowed import Allowances
from scheduler.store.db import Database, open_database
from scheduler.store.wakeup import Listener

log = logging.getLogger("shoal.serve")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(
    *,
    host: str,
    port: int,
    state_dir: str,
    database_url: str | None,
    cluster: str | None,
    backend_kind: str,
    policy: str,
    interval_s: float,
    min_runtime_s: float,
    job_retention_s: float | None = None,
    gpus: str | None = None,
    fallback_simulated: bool = False,
    worker_user: str | None = None,
    shared_user_ok: bool = False,
    role: str = "all",
    api_workers: int = 1,
) -> None:
    """`role` (scheduler.cli.roles): all, or one half of the service on the shared store."""
    part, kind = roles.parse(role), serve_settings.BackendKind.parse(backend_kind)
    typed_secret = servesetup.password_on_command_line(sys.argv, database_url)
    if typed_secret is not None:
        log.warning("%s", typed_secret)
    state = Path(state_dir).resolve()
    db_url = database_url or f"sqlite:///{state / 'shoal.db'}"
    roles.check(part, backend_kind=kind, database_url=db_url, api_workers=api_workers)
    env, pol = servesetup.settings_and_policy(policy, min_runtime_s, interval_s)
    url = f"http://{host}:{port}"
    owns_state = servesetup.claim(state, url, kind)
    # The port before any "serving on" or `url` file: a busy one stops here. The
    # scheduler role's port serves probes only: the CLI must not be sent there.
    url_file = state / "url" if owns_state and part is not Role.SCHEDULER else None
    sock, url = listen.claim_port(host, port, url_file=url_file)
    secure(state)
    admin, worker_key, tokens = servesetup.tokens(env, state, url if url_file else None)
    # What an API in a process of its own reads (`--role api`, or plain serve's API).
    role_env = apirole.role_environment(
        database_url=db_url,
        tokens=tokens,
        worker_key=worker_key,
        policy=policy,
        min_runtime_s=min_runtime_s,
        interval_s=interval_s,
    )
    if part is Role.API:
        servesetup.announce(url, state, db_url, admin, part)
        try:
            apirole.run(sock, api_workers, role_env)
        finally:
            print("Shoal stopped", flush=True)
        return
    database = open_database(db_url)
    # Replicas in pods all run as pid 1: the pod name tells them apart.
    holder = lease_identity(state, pod_name=env.pod_name, owns_state=owns_state)
    if kind is serve_settings.BackendKind.LOCAL:
        refuse_second_local_replica(database, holder)
    api_url = env.worker_api_url or url
    wired, loop = _wire(
        kind,
        state,
        cluster,
        env=env,
        database=database,
        config=LoopConfig(
            holder=holder,
            interval_s=pol.interval_s,
            job_retention_s=job_retention_s,
            core=pol.core,
            worker_env=(
                ScopedWorkerEnv(api_url, worker_key) if worker_key else {"SHOAL_API_URL": api_url}
            ),
        ),
        gpus=gpus,
        fallback_simulated=fallback_simulated,
        worker_user=worker_user,
        shared_user_ok=shared_user_ok,
        chart_limits=pol.allowed,
    )
    backend = wired.backend
    stop = threading.Event()  # the loop's thread: made before the app, whose /healthz checks it
    thread = threading.Thread(target=loop.run_forever, args=(stop,), name="loop", daemon=True)
    # The API is in other processes (`--role scheduler`), or in one of its own
    # (`scheduler.cli.apiproc`): its writes wake the loop through the database.
    listener = Listener(database, loop.wake)
    servesetup.announce(url, state, db_url, admin, part)
    try:
        if part is Role.SCHEDULER:
            _run(_probes(database, loop, thread, pol.interval_s, tokens), loop, sock, thread, stop)
        else:
            handover = _handover(backend, state, shared_user_ok, _stall_s(pol.interval_s))
            _run_apart(database, loop, sock, thread, stop, role_env, handover)
    finally:
        listener.close()
        wired.close()
        database.close()
        print("Shoal stopped", flush=True)


def _wire(
    kind: serve_settings.BackendKind,
    state: Path,
    cluster: str | None,
    *,
    env: serve_settings.ServeSettings,
    database: Database,
    config: LoopConfig,
    gpus: str | None,
    fallback_simulated: bool,
    worker_user: str | None,
    shared_user_ok: bool,
    chart_limits: Allowances | None,
) -> tuple[Wired, Loop]:
    """The backend and the loop it wakes (made in that order), after one cycle: the
    inventory is in the store before the first submission."""
    wake: list[Loop] = []

    def on_change() -> None:  # the backend exists before the loop it wakes
        if wake:
            wake[0].wake()

    wired = make_backend(
        kind,
        state,
        cluster,
        on_change,
        env=env,
        database=database,
        gpus=gpus,
        fallback_simulated=fallback_simulated,
        worker_user=worker_user,
        shared_user_ok=shared_user_ok,
        chart_limits=chart_limits,
    )
    # The kubernetes runtime's Lease decides who leads; other backends always lead.
    loop = Loop(database, wired.backend, config=replace(config, is_leader=wired.is_leader))
    wake.append(loop)
    loop.run_once()
    return wired, loop


def _handover(
    backend: base.ClusterBackend, state: Path, shared_user_ok: bool, stall_s: float
) -> apiproc.Handover:
    """What the API process takes from the backend: the local one's refusals, excluded
    GPUs and team-token refusal; the Kubernetes one's namespaces (it excludes nodes as
    the stored inventory says, as `--role api` does)."""
    if isinstance(backend, LocalBackend):
        return apiproc.Handover(
            state_dir=str(state),
            allowed_host_paths=backend.allowed_host_paths,
            excluded_nodes=backend.excluded_nodes(),
            team_tokens_refused=team_refusal(backend.users, shared_user_ok=shared_user_ok),
            stall_s=stall_s,
        )
    from scheduler.backends.kubernetes import KubernetesBackend  # loaded by now: it runs

    assert isinstance(backend, KubernetesBackend), "serve runs the local or kubernetes backend"
    return apiproc.Handover(
        state_dir=str(state),
        allowed_host_paths=(),
        excluded_nodes={},
        team_tokens_refused=None,
        stall_s=stall_s,
        job_namespaces=tuple(backend.config.job_namespaces),
    )


def _probes(
    database: Database, loop: Loop, thread: threading.Thread, interval_s: float, tokens: Path
) -> Starlette:
    """The scheduler role's port: probes and the cycle metrics (`scheduler.cli.probes`)."""
    metrics = _loop_metrics(database, loop)
    table = TokenTable.load(path=str(tokens), inline=os.environ.get("SHOAL_API_TOKENS"))
    return probe_app(database, loop_health(loop, thread, _stall_s(interval_s)), metrics, table)


def _loop_metrics(database: Database, loop: Loop) -> Metrics:
    """The cycle series, fed by `loop` (the store's series are the API's to report)."""
    metrics = Metrics(database, store_series=False)
    metrics.follow_leader(lambda: loop.leading)
    loop.observers.append(metrics.observe_cycle)
    return metrics


def _stall_s(interval_s: float) -> float:
    return float(os.environ.get("SHOAL_LOOP_STALL_SECONDS") or max(120.0, 20 * interval_s))


def _start_loop(loop: Loop, thread: threading.Thread, stop: threading.Event) -> None:
    """Start the loop cycling on `thread` (stopped by `stop`), and the start-time estimator
    beside it, woken by each cycle (SHOAL_ETA_INTERVAL_SECONDS, default 30, spaces out the
    forecasts of a state that merely moved; 0: off)."""
    thread.start()
    eta_s = float(os.environ.get("SHOAL_ETA_INTERVAL_SECONDS") or 30)
    if eta_s > 0 and isinstance(loop.database, Database):
        estimator = Estimator(loop.database, EstimatorConfig(interval_s=eta_s))
        loop.observers.append(estimator.observe)
        threading.Thread(
            target=estimator.run_forever, args=(stop,), name="estimator", daemon=True
        ).start()
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises SIGTERM once it has stopped; with the default handler that
        # kills the process before the clean-up (Lease release, store lease, the API
        # process).
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _stop_loop(loop: Loop, thread: threading.Thread, stop: threading.Event) -> None:
    stop.set()
    loop.wake()
    thread.join(timeout=10)


def _run(
    app: Starlette,
    loop: Loop,
    sock: socket.socket,
    thread: threading.Thread,
    stop: threading.Event,
) -> None:
    """Serve `app` with the loop cycling on `thread` until uvicorn stops."""
    _start_loop(loop, thread, stop)
    try:
        uvicorn.Server(uvicorn.Config(app, http=GuardedH11, log_level="warning")).run(
            sockets=[sock]
        )
    finally:
        _stop_loop(loop, thread, stop)


def _run_apart(
    database: Database,
    loop: Loop,
    sock: socket.socket,
    thread: threading.Thread,
    stop: threading.Event,
    role_env: dict[str, str],
    handover: apiproc.Handover,
) -> None:
    """The loop here, the API in its own process on `sock` (`scheduler.cli.apiproc`),
    until either stops: Ctrl-C or SIGTERM here, or the API process's end, which stops
    this one too with why."""
    metrics = _loop_metrics(database, loop)  # the loop's families, for the API's
    _start_loop(loop, thread, stop)
    # Ctrl-C even where a shell started this with SIGINT ignored (in the background), as
    # uvicorn, which sets its own handler, took it when it served in this process.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    pulse = Pulse.create()
    beat(pulse, loop, thread, stop, handover.stall_s)
    api = apiproc.Supervised(sock, role_env, handover, pulse, serve_series(metrics.loop_registry))
    sock.close()  # the API process's now: with it gone, the port is too
    try:
        status = api.wait()
    except KeyboardInterrupt:  # Ctrl-C: a stop asked for, as uvicorn took it in one process
        return
    finally:
        api.stop()
        _stop_loop(loop, thread, stop)
    raise SystemExit(
        f"the API process (pid {api.pid}) exited with status {status}: Shoal stops with "
        "it (its log is above)"
    )
