"""The `shoal` command (typer): `serve`, `submit`, `jobs`, `job`, `explain`, `logs`,
`cancel`, `delete`, `queues`, `tokens`, `nodes`, `simulate`, `worker`, `reserve`.
Everything but `serve`, `simulate`, `worker` and `reserve` talks to the REST API (see
`client` for the URL and token; `admin` for queues and tokens, `submit` for submit)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli import admin, cluster, jobs, output, submit
from scheduler.cli import explain as explaining
from scheduler.cli import serveoptions as opts
from scheduler.cli.client import Api
from scheduler.cli.output import Format, Output

app = typer.Typer(
    name="shoal",
    help="Shoal: a GPU-aware job scheduler.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(admin.queues_app, name="queues")
app.add_typer(admin.tokens_app, name="tokens")

Url = admin.Url
Token = admin.Token


@app.command()
def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    state_dir: opts.StateDir = "var/shoal",
    database_url: opts.DatabaseUrl = None,
    cluster_file: opts.ClusterFile = None,
    backend: opts.Backend = "local",
    policy: str = "fgd",
    interval: opts.Interval = 1.0,
    min_runtime: opts.MinRuntime = 60.0,
    job_retention: opts.JobRetention = 7 * 24 * 3600.0,
    gpus: opts.Gpus = None,
    fallback_simulated: opts.FallbackSimulated = False,
    worker_user: opts.WorkerUser = None,
    shared_user_ok: opts.SharedUserOk = False,
    role: opts.ServeRole = "all",
    api_workers: opts.ApiWorkers = 1,
) -> None:
    """Run the API and the scheduler on the embedded default (SQLite, local workers);
    --role api / scheduler runs one half (docs/install.md)."""
    from scheduler.cli import serve as serving

    os.umask(0o077)  # what the service writes (secrets, database, logs) is its own

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    serving.serve(
        host=host,
        port=port,
        state_dir=state_dir,
        database_url=database_url,
        cluster=cluster_file,
        backend_kind=backend,
        policy=policy,
        interval_s=interval,
        min_runtime_s=min_runtime,
        job_retention_s=job_retention or None,
        gpus=gpus,
        fallback_simulated=fallback_simulated,
        worker_user=worker_user,
        shared_user_ok=shared_user_ok,
        role=role,
        api_workers=api_workers,
    )


app.command(context_settings={"allow_extra_args": True, "allow_interspersed_args": False})(
    submit.submit
)


@app.command()
def explain(name: str, fmt: Output = Format.TABLE, url: Url = None, token: Token = None) -> None:
    """Why a job waits (or where it goes): fair share, its place, the candidate nodes."""
    explaining.show(Api(url, token), name, fmt)


@app.command("jobs")
def list_jobs(
    queue: str | None = None,
    phase: str | None = None,
    limit: int = 50,
    fmt: Output = Format.TABLE,
    url: Url = None,
    token: Token = None,
) -> None:
    """List jobs, newest first (-o wide: every column; -o json|yaml: the API's objects)."""
    jobs.jobs_table(Api(url, token), queue, phase, limit, fmt)


@app.command()
def job(name: str, fmt: Output = Format.TABLE, url: Url = None, token: Token = None) -> None:
    """One job: phase, placement, pending reason, events, latest progress."""
    jobs.show_job(Api(url, token), name, fmt)


@app.command()
def logs(
    name: str,
    follow: Annotated[bool, typer.Option("-f", "--follow")] = False,
    worker: int | None = None,
    attempt: int | None = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Worker output (latest attempt); -f follows to the end (exit 1 unless Succeeded)."""
    raise typer.Exit(
        jobs.follow_logs(Api(url, token), name, follow=follow, worker=worker, attempt=attempt)
    )


@app.command()
def delete(name: str, url: Url = None, token: Token = None) -> None:
    """Delete a finished job and its history (cancel a live one first)."""
    api = Api(url, token)
    j = api.find_job(name)
    api.request("DELETE", f"/jobs/{j['id']}")
    output.out.print(f"job {j['name']} ({j['id']}) deleted")


@app.command()
def cancel(name: str, url: Url = None, token: Token = None) -> None:
    """Cancel a job (its workers get SIGTERM and their grace period)."""
    api = Api(url, token)
    j = api.find_job(name)
    j = api.post(f"/jobs/{j['id']}/cancel")
    output.out.print(
        f"job {j['name']}: {'cancelling' if j['phase'] != 'Cancelled' else 'Cancelled'}"
    )


@app.command()
def nodes(fmt: Output = Format.TABLE, url: Url = None, token: Token = None) -> None:
    """Nodes and a map of every GPU with the fractions its workers hold."""
    cluster.nodes_map(Api(url, token), fmt)


@app.command()
def simulate(
    trace_file: Annotated[
        Path, typer.Argument(help="trace CSV/YAML (Shoal or Alibaba openb form)")
    ],
    cluster_file: Annotated[Path | None, typer.Option("--cluster", help="nodes YAML")] = None,
    alibaba_nodes: Annotated[Path | None, typer.Option(help="openb_node_list CSV instead")] = None,
    nodes_limit: Annotated[int | None, typer.Option("--nodes", help="first N nodes of it")] = None,
    queues_file: Annotated[Path | None, typer.Option("--queues", help="queue specs YAML")] = None,
    limit: Annotated[int | None, typer.Option(help="first N jobs of the trace")] = 300,
    policy: str = "fgd",
    tick: Annotated[float, typer.Option(help="virtual seconds between idle cycles")] = 60.0,
    max_duration: Annotated[float, typer.Option(help="cap on a job's duration (s)")] = 86400.0,
    arrival_scale: Annotated[
        float, typer.Option(help="multiply submit times (<1: more load)")
    ] = 1.0,
    series: Annotated[Path | None, typer.Option(help="write the utilisation series CSV")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="write a PNG: utilisation, queues, wait times")
    ] = None,
    every_tick: Annotated[
        bool, typer.Option(help="run every idle tick (slow; same decisions)")
    ] = False,
) -> None:
    """Replay a job trace in virtual time through the same loop and core."""
    from scheduler.cli import simulate as sim
    from scheduler.model import Policy

    if policy not in set(Policy):
        names = ", ".join(p.value for p in Policy)
        raise typer.BadParameter(f"{policy!r} is not one of {names}", param_hint="--policy")

    logging.basicConfig(level=logging.ERROR)  # the core's reports are counted instead
    sim.run(
        trace_file,
        cluster_file=cluster_file,
        alibaba_node_file=alibaba_nodes,
        node_limit=nodes_limit,
        queues_file=queues_file,
        limit=limit,
        policy=policy,
        tick_s=tick,
        arrival_scale=arrival_scale,
        max_duration_s=max_duration,
        series_out=series,
        plot_out=plot,
        every_tick=every_tick,
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(ctx: typer.Context) -> None:
    """Run a command as a Shoal worker: `shoal worker -- python train.py`."""
    from scheduler.worker import launcher

    raise typer.Exit(launcher.run(list(ctx.args)))


@app.command()
def reserve() -> None:
    """Hold one GPU for fractional workers (the process of a GPU reservation pod)."""
    from scheduler.backends.kubernetes.reservations import reserve as reserving

    raise typer.Exit(reserving.main())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
