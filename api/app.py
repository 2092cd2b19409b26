"""The FastAPI application factory: `create_app(settings)`.

Nothing connects at import time: the factory opens the store (running migrations) unless
`settings.database` hands one in, loads the tokens, and mounts every module in
`api.routes`. `uvicorn --factory api.app:app_from_env` serves it from SHOAL_* variables.
What the routes use is one frozen `api.services.Services`, made here; `shoal serve` hands
in its backend's and loop's parts as a `Wiring`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import apidocs, errors, routes
from api.auth import TokenTable
from api.dashboard.history import History
from api.feasibility_cache import FeasibilitySnapshot, InvalidateOnQueueWrite
from api.limits import BodySizeLimit
from api.metrics import LatencyMiddleware, Metrics
from api.overload import LoadShedder
from api.services import Services, Wiring
from api.settings import Settings
from scheduler.store.db import open_database


def create_app(settings: Settings, wiring: Wiring | None = None) -> FastAPI:
    database = settings.database or open_database(settings.database_url)
    owns_database = settings.database is None
    wired = wiring or Wiring()
    services = Services(
        database=database,
        history=History(database),
        tokens=TokenTable.load(path=settings.tokens_file, inline=settings.tokens_yaml),
        worker_key=settings.worker_key,
        # Fair shares are computed with the policy the loop runs (given by `shoal serve`).
        metrics=Metrics(database, config=lambda: wired.core_config, loop_series=wired.loop_series),
        # Admission reads queues and nodes from a snapshot (api.feasibility_cache).
        feasibility=FeasibilitySnapshot(
            settings.admission_ttl_s,
            chart_limits=wired.chart_limits,
            jobs_namespace=wired.jobs_namespace,
        ),
        wiring=wired,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.history.start()  # the dashboard's charts (api.dashboard.history)
        yield
        services.history.stop()
        if owns_database:
            database.close()

    app = FastAPI(
        title="Shoal",
        version="0.1.0",
        description="GPU-aware job scheduler: queues, jobs, nodes.",
        lifespan=lifespan,
        docs_url=None,  # served from the package by api.apidocs: no CDN
        redoc_url=None,
        # One schema per model (JobSpec, not JobSpec-Input and -Output): what a client
        # sends and reads back is the same shape, nulls left out on the way back.
        separate_input_output_schemas=False,
    )
    app.state.services = services
    # Only for tests' set-up (they seed the store through it); routes read `services`.
    app.state.database = database
    errors.install(app)
    apidocs.install(app)
    for prefix, router in routes.discover():
        common = {} if prefix == "" else errors.COMMON_RESPONSES
        app.include_router(router, prefix=prefix, responses=common)
    # Each add wraps the ones before: the shedder is outermost, so an overloaded server
    # refuses before it parses anything; then the size limit, before anything reads the body.
    app.add_middleware(LatencyMiddleware, metrics=services.metrics)
    queues = f"{routes.API_PREFIX}/queues"
    app.add_middleware(InvalidateOnQueueWrite, snapshot=services.feasibility, prefix=queues)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        LoadShedder,
        max_in_flight=settings.max_in_flight,
        max_queued=settings.max_queued,
        max_wait_s=settings.max_wait_s,
        retry_after_s=settings.retry_after_s,
        registry=services.metrics.registry,
    )
    return app


def app_from_env() -> FastAPI:
    return create_app(Settings.from_env())
