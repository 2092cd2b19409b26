"""`shoal serve`: the whole service in one process - the API (uvicorn) and the scheduler
loop (a thread) on one store, with the local backend by default.

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
workers run as `--worker-user` / the cluster file's `workerUser` (when this is root);
where they would run as the service's own user, team tokens are refused with the reason,
unless `--shared-user-ok` accepts that (docs/gpu.md, "Sharing one box between teams").
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import threading
from dataclasses import replace
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from api.app import create_app
from api.services import Wiring, services_of
from api.settings import Settings
from scheduler import model
from scheduler.backends import base
from scheduler.backends.local import LocalBackend
from scheduler.cli import listen
from scheduler.cli import settings as serve_settings
from scheduler.cli.statedir import claim_state as claim_state  # re-exported (tests)
from scheduler.cli.statedir import prepare_state as prepare_state  # re-exported (tests)
from scheduler.cli.statedir import secure
from scheduler.cli.wiring import (
    WakeOnWrite,
    Wired,
    lease_identity,
    loop_health,
    make_backend,
    refuse_second_local_replica,
    team_refusal,
)
from scheduler.loop.service import Loop, LoopConfig
from scheduler.loop.workerenv import ScopedWorkerEnv
from scheduler.store.db import Database, open_database

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
) -> None:
    env, pol = _settings(policy, min_runtime_s, interval_s)
    state = Path(state_dir).resolve()
    url = f"http://{host}:{port}"
    owns_state = _claim(state, url, backend_kind)
    # The port before any "serving on" or `url` file: a busy one stops here.
    sock, url = listen.claim_port(host, port, url_file=state / "url" if owns_state else None)
    secure(state)
    admin, worker_key, tokens = _tokens(env, state, url)
    db_url = database_url or f"sqlite:///{state / 'shoal.db'}"
    database = open_database(db_url)
    # Replicas in pods all run as pid 1: the pod name tells them apart.
    holder = lease_identity(state, pod_name=env.pod_name, owns_state=owns_state)
    if backend_kind == "local":
        refuse_second_local_replica(database, holder)
    wired, loop = _wire(
        backend_kind,
        state,
        cluster,
        env=env,
        database=database,
        config=LoopConfig(
            holder=holder,
            interval_s=pol.interval_s,
            job_retention_s=job_retention_s,
            core=pol.core,
            worker_env=ScopedWorkerEnv(url, worker_key) if worker_key else {"SHOAL_API_URL": url},
        ),
        gpus=gpus,
        fallback_simulated=fallback_simulated,
        worker_user=worker_user,
    )
    backend = wired.backend
    settings = _api_settings(db_url, tokens, database, worker_key)
    stop = threading.Event()  # the loop's thread: made before the app, whose /healthz checks it
    thread = threading.Thread(target=loop.run_forever, args=(stop,), name="loop", daemon=True)
    app = _app(settings, loop, thread, backend, pol.core, pol.interval_s, shared_user_ok)
    _announce(url, state, db_url, admin)
    try:
        _run(app, loop, sock, thread, stop)
    finally:
        wired.close()
        database.close()
        print("Shoal stopped", flush=True)


def _wire(
    kind: str,
    state: Path,
    cluster: str | None,
    *,
    env: serve_settings.ServeSettings,
    database: Database,
    config: LoopConfig,
    gpus: str | None,
    fallback_simulated: bool,
    worker_user: str | None,
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
    )
    # The kubernetes runtime's Lease decides who leads; other backends always lead.
    loop = Loop(database, wired.backend, config=replace(config, is_leader=wired.is_leader))
    wake.append(loop)
    loop.run_once()
    return wired, loop


def _api_settings(
    db_url: str, tokens: Path, database: Database, worker_key: str | None
) -> Settings:
    """The API's settings on the loop's store: SHOAL_API_* limits (body size, load
    shedding) as `uvicorn api.app:app_from_env` reads them, the tokens made here."""
    return dataclasses.replace(
        Settings.from_env(),
        database_url=db_url,
        tokens_file=str(tokens),
        tokens_yaml=os.environ.get("SHOAL_API_TOKENS"),
        database=database,
        worker_key=worker_key,
    )


def _announce(url: str, state: Path, db_url: str, admin: str | None) -> None:
    print(f"Shoal serving on {url}  (state {state}, database {db_url})", flush=True)
    if admin is not None:
        print(f"admin token: {admin}  (also in {state / 'admin-token'})", flush=True)


def _settings(
    policy: str, min_runtime_s: float, interval_s: float
) -> tuple[serve_settings.ServeSettings, serve_settings.Policy]:
    """The chart's environment and the policy (file, then flags); bad ones stop here."""
    try:
        env = serve_settings.from_env()
        pol = serve_settings.load_policy(
            env.policy_file,
            policy=policy,
            min_runtime_s=min_runtime_s,
            interval_s=interval_s,
            worker_tolerations=env.worker_tolerations,
        )
    except serve_settings.SettingsError as e:
        raise SystemExit(str(e)) from None
    return env, pol


def _claim(state: Path, url: str, backend_kind: str) -> bool:
    """Claim the state directory; whether this process owns it (no other `shoal serve`
    uses it). Two local backends on one directory are refused."""
    holder = claim_state(state, url)
    if holder is not None:
        what = f"another `shoal serve` ({holder}) is using the state directory {state}"
        if backend_kind == "local":
            # Two local backends on one directory would both run and reap its workers.
            raise SystemExit(f"{what}; stop it first, or give this one another --state-dir")
        log.warning("%s; only one of them schedules at a time (the store's lease)", what)
    return holder is None


def _tokens(
    env: serve_settings.ServeSettings, state: Path, url: str
) -> tuple[str | None, str | None, Path]:
    """(the admin token made now, the worker-token key, the tokens file)."""
    admin: str | None
    worker_key: str | None
    if env.tokens_file:  # tokens come from the operator (the chart's Secret): make none
        state.mkdir(parents=True, exist_ok=True)
        admin, worker_key, tokens = None, None, Path(env.tokens_file)
    else:
        admin, worker_key, tokens = prepare_state(state, url)
    return admin, os.environ.get("SHOAL_WORKER_KEY") or worker_key, tokens


def _app(
    settings: Settings,
    loop: Loop,
    thread: threading.Thread,
    backend: base.ClusterBackend,
    core: model.Config,
    interval_s: float,
    shared_user_ok: bool,
) -> FastAPI:
    """The API on the loop's store, wired to `backend` and to the loop on `thread`."""
    stall_s = float(os.environ.get("SHOAL_LOOP_STALL_SECONDS") or max(120.0, 20 * interval_s))
    local_users = backend.users if isinstance(backend, LocalBackend) else None
    abilities = backend.capabilities()
    excluded = abilities.excluded_nodes
    wiring = Wiring(
        log_source=abilities.logs,
        core_config=core,  # explain accounts with the policy the loop runs
        excluded_nodes=excluded.excluded_nodes if excluded is not None else None,
        loop_health=loop_health(loop, thread, stall_s),
        team_tokens_refused=team_refusal(local_users, shared_user_ok=shared_user_ok),
    )
    app = create_app(settings, wiring)
    metrics = services_of(app).metrics
    metrics.follow_leader(lambda: loop.leading)
    loop.observers.append(metrics.observe_cycle)
    app.add_middleware(WakeOnWrite, loop=loop)
    return app


def _run(
    app: FastAPI, loop: Loop, sock: socket.socket, thread: threading.Thread, stop: threading.Event
) -> None:
    """Serve `app` with the loop cycling on `thread` (stopped by `stop`), until uvicorn stops."""
    thread.start()
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises SIGTERM once it has stopped; with the default handler that
        # kills the process before the clean-up below (Lease release, store lease).
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        stop.set()
        loop.wake()
        thread.join(timeout=10)
