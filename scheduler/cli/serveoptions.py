"""The options of `shoal serve`, as typer Annotated aliases: the command's signature
stays a list of names and defaults, and each option's help lives here."""

from __future__ import annotations

from typing import Annotated

import typer

StateDir = Annotated[str, typer.Option(envvar="SHOAL_STATE_DIR")]
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        envvar="SHOAL_DATABASE_URL",
        help="default: SQLite in the state dir. Give a URL with a password as "
        "SHOAL_DATABASE_URL instead: every local user can read a command line",
    ),
]
ClusterFile = Annotated[
    str | None, typer.Option("--cluster", help="nodes YAML (default: 2 nodes x 4 GPUs)")
]
Backend = Annotated[str, typer.Option(envvar="SHOAL_BACKEND", help="local or kubernetes")]
Interval = Annotated[float, typer.Option(help="seconds between cycles when nothing happens")]
MinRuntime = Annotated[float, typer.Option(help="seconds a job runs before it may be preempted")]
JobRetention = Annotated[
    float,
    typer.Option(
        envvar="SHOAL_JOB_RETENTION",
        help="seconds a finished job is kept before it is deleted (0: forever)",
    ),
]
Gpus = Annotated[
    str | None,
    typer.Option(
        envvar="SHOAL_GPUS",
        help="auto: run workers on this host's GPUs (found through NVML) instead of "
        "the simulated cluster; stops with 'no GPU found' where there is none",
    ),
]
FallbackSimulated = Annotated[
    bool,
    typer.Option(help="with --gpus auto on a host with no GPU: run the simulated cluster"),
]
WorkerUser = Annotated[
    str | None,
    typer.Option(
        envvar="SHOAL_WORKER_USER",
        help="local backend, run as root: the OS user workers run as (over the cluster "
        "file's workerUser; queueUsers there give a queue its own). With neither: "
        "shoal-worker, created if absent",
    ),
]
SharedUserOk = Annotated[
    bool,
    typer.Option(
        envvar="SHOAL_SHARED_USER_OK",
        help="keep workers as this server's own user (no shoal-worker) and accept team "
        "tokens all the same (one trusted team only: its workers can read the state "
        "directory)",
    ),
]
ServeRole = Annotated[
    str,
    typer.Option(
        envvar="SHOAL_ROLE",
        help="all: the API and the scheduler in this process; api: the API alone; "
        "scheduler: the backend and the loop, with only probes and /metrics on the port "
        "(docs/install.md, 'API and scheduler apart')",
    ),
]
ApiWorkers = Annotated[
    int,
    typer.Option(
        envvar="SHOAL_API_WORKERS",
        help="--role api: uvicorn worker processes (more than 1 needs PostgreSQL)",
    ),
]
