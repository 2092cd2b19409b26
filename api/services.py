"""What the API's routes use, made once by `api.app.create_app`: one frozen `Services`
(stored as `app.state.services`, read through `api.deps.get_services`).

`Wiring` is what the serving process hands in (`shoal serve`: the backend's logs and
excluded nodes, the loop's policy and health, why team tokens are refused); an app built
without it (tests, `uvicorn api.app:app_from_env`) has none of them, and says so where a
route needs one (501 for logs, no loop to check in /healthz, the default policy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI
from prometheus_client.registry import Collector

from api.auth import TokenTable
from api.dashboard.history import History
from api.feasibility_cache import FeasibilitySnapshot
from api.metrics import Metrics
from scheduler import model
from scheduler.backends import base
from scheduler.spec.allowed import Allowances
from scheduler.store.db import Database


@dataclass(frozen=True)
class Wiring:
    """What the serving process gives the API; each part optional."""

    # Where workers' output is: the backend's `WorkerLogs` ability (the local backend).
    log_source: base.WorkerLogs | None = None
    # The policy the loop runs: explain, queue stats and fair-share metrics use it.
    core_config: model.Config | None = None
    # Nodes the backend does not offer, with why (the dashboard's cluster page).
    excluded_nodes: Callable[[], dict[str, str]] | None = None
    # None while the scheduler loop cycles, else why not (/healthz).
    loop_health: Callable[[], str | None] | None = None
    # Why team tokens are refused here (workers would run as the service's user).
    team_tokens_refused: str | None = None
    # The chart's limits on what a job may ask (admission.allowed; scheduler.spec.allowed).
    chart_limits: Allowances | None = None
    # Where a job that names no namespace runs (its namespace for allowed.namespaces).
    jobs_namespace: str = "shoal-jobs"
    # What of a valid spec the backend cannot run (the local backend's processes mount no
    # claims): a 422 before anything is stored.
    spec_refusals: base.SpecRefusals | None = None
    # The loop's per-cycle metric families when it runs in another process (plain `shoal
    # serve`'s API process asks the scheduler's: `scheduler.cli.loopshare`).
    loop_series: Collector | None = None


class ProgressMemory:
    """What progress reports this process has seen: the last recorded report per job
    (the throttle) and the final reports per (job, attempt). Mutable, in a frozen
    `Services`: bounded by the route (`api.routes.logs`), lost on restart."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.final: dict[tuple[str, int], None] = {}


@dataclass(frozen=True)
class Services:
    database: Database
    history: History  # the dashboard's charts, started and stopped with the app
    tokens: TokenTable
    worker_key: str | None  # signs per-job worker tokens (`scheduler.workertoken`)
    metrics: Metrics
    feasibility: FeasibilitySnapshot
    wiring: Wiring = Wiring()
    progress: ProgressMemory = field(default_factory=ProgressMemory)


def services_of(app: FastAPI) -> Services:
    """The app's services (for `shoal serve` and tests; routes use `api.deps`)."""
    services: Services = app.state.services
    return services
