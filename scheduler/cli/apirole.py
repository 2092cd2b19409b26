"""`shoal serve --role api`: the API alone, in one or `--api-workers` uvicorn processes.

What the API of `--role all` takes from the backend and the loop comes from the store
here or is absent: nodes offering no GPU fractions are the stored inventory's
`no_sharing` (cordoned or NotReady nodes are not in the inventory: the scheduler's
`/metrics` and the cluster show them); worker logs are 501, as on the kubernetes backend
in any role (`kubectl logs`); /healthz says the process serves (the loop's health is the
scheduler's own /healthz: an API replica restarted for a wedged scheduler would not mend
it), /readyz that the database answers. Writes wake the scheduler through the database
(`scheduler.store.wakeup.Notifier`).

uvicorn starts each worker process from an import string, so everything the app needs
travels in the environment: the SHOAL_* variables the API reads anyway
(`api.settings.Settings.from_env`) and, in `CONFIG_VAR`, the flags `shoal serve` took.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from api.app import create_app
from api.services import Wiring, services_of
from api.settings import Settings
from scheduler.cli import settings as serve_settings
from scheduler.cli.connguard import GuardedH11
from scheduler.cli.wiring import WakeOnWrite
from scheduler.store import cluster
from scheduler.store.db import Database
from scheduler.store.wakeup import Notifier

CONFIG_VAR = "SHOAL_API_ROLE_CONFIG"
FACTORY = "scheduler.cli.apirole:app_from_env"


def stored_exclusions(database: Database) -> dict[str, str]:
    """node -> why it offers no GPU fractions, as the scheduler last stored it."""
    with database.session() as session:
        nodes = cluster.load_inventory(session=session)
    return {n.name: n.no_sharing for n in nodes if n.no_sharing}


def app_from_env(adapt: Callable[[Wiring], Wiring] | None = None) -> FastAPI:
    """The API role's app from the environment (each uvicorn worker calls this). `adapt`:
    what a serving process adds to the role's wiring (plain `shoal serve`'s API process,
    `scheduler.cli.apiproc`: the local backend's and the loop's parts)."""
    flags = json.loads(os.environ.get(CONFIG_VAR) or "{}")
    try:
        env = serve_settings.from_env()
        pol = serve_settings.load_policy(
            env.policy_file,
            policy=str(flags.get("policy", "fgd")),
            min_runtime_s=float(flags.get("min_runtime_s", 60.0)),
            interval_s=float(flags.get("interval_s", 1.0)),
            worker_tolerations=env.worker_tolerations,
        )
    except serve_settings.SettingsError as e:
        raise SystemExit(str(e)) from None
    opened: list[Database] = []
    wiring = Wiring(
        core_config=pol.core,  # explain and the fair-share figures use the loop's policy
        chart_limits=pol.allowed,
        jobs_namespace=env.jobs_namespace,
        excluded_nodes=lambda: stored_exclusions(opened[0]),
    )
    app = create_app(Settings.from_env(), adapt(wiring) if adapt else wiring)
    database = services_of(app).database
    opened.append(database)
    app.add_middleware(WakeOnWrite, wake=Notifier(database).notify)
    return app


def role_environment(
    *,
    database_url: str,
    tokens: Path,
    worker_key: str | None,
    policy: str,
    min_runtime_s: float,
    interval_s: float,
) -> dict[str, str]:
    """What `app_from_env` reads, from `shoal serve`'s flags and state directory."""
    env = {
        "SHOAL_DATABASE_URL": database_url,
        "SHOAL_API_TOKENS_FILE": str(tokens),
        CONFIG_VAR: json.dumps(
            {"policy": policy, "min_runtime_s": min_runtime_s, "interval_s": interval_s}
        ),
    }
    if worker_key:
        env["SHOAL_WORKER_KEY"] = worker_key
    return env


def run(sock: socket.socket, workers: int, environment: Mapping[str, str]) -> None:
    """Serve the API role on `sock` until stopped: in this process when `workers` is 1,
    else in that many uvicorn worker processes sharing the socket."""
    os.environ.update(environment)  # the worker processes inherit it
    config = uvicorn.Config(
        FACTORY, factory=True, workers=workers, http=GuardedH11, log_level="warning"
    )
    if workers == 1:
        uvicorn.Server(config).run(sockets=[sock])
        return
    Multiprocess(config, sockets=[sock]).run()
