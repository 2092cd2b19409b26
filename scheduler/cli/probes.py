"""The port of `shoal serve --role scheduler`: no API, only what the kubelet and Prometheus
ask. `/healthz` fails when the loop's thread died or one cycle runs past the stall limit
(`wiring.loop_health`), so the kubelet restarts a wedged scheduler; `/readyz` answers
when the database does; `/metrics` carries the cycle series (durations, steps, waits,
preemptions, `shoal_leader`), for an admin or metrics token of the tokens file. The
queue and GPU gauges read from the store are the API's (`--role api`), not repeated.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from api.auth import Role, TokenTable
from api.metrics import Metrics
from scheduler.store.db import Database
from scheduler.store.errors import DatabaseError

SCRAPERS = frozenset({Role.ADMIN, Role.METRICS})


def probe_app(
    database: Database,
    health: Callable[[], str | None],
    metrics: Metrics,
    tokens: TokenTable,
) -> Starlette:
    """The scheduler role's app on its port."""

    def healthz(_: Request) -> Response:
        problem = health()
        return JSONResponse({"status": problem or "ok"}, status_code=503 if problem else 200)

    def readyz(_: Request) -> Response:
        try:
            database.ping()
        except DatabaseError:
            return JSONResponse({"status": "database unreachable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    def scrape(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        principal = tokens.lookup(token) if scheme.lower() == "bearer" and token else None
        if principal is None:
            headers = {"WWW-Authenticate": "Bearer"}
            return PlainTextResponse("a bearer token is needed", status_code=401, headers=headers)
        if principal.role not in SCRAPERS:
            return PlainTextResponse("an admin or metrics token only", status_code=403)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", scrape),
    ]
    return Starlette(routes=routes)
