"""Liveness (the scheduler loop cycles), readiness (the database answers) and Prometheus
metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from api import errors, models
from api.deps import DatabaseDep, ScraperDep, ServicesDep
from api.metrics import render
from scheduler.store.errors import DatabaseError

PREFIX = ""
router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=models.Health,
    responses={503: {"model": models.Health, "description": "the scheduler loop is wedged"}},
)
def healthz(services: ServicesDep, response: Response) -> models.Health:
    """Alive: the process serves requests and, where it runs one (`shoal serve`), its
    scheduler loop still cycles (its thread is alive and no cycle has run past the stall
    limit). A database outage is not a liveness failure (`/readyz` reports that)."""
    check = services.wiring.loop_health
    problem = check() if check is not None else None
    if problem:
        response.status_code = 503
        return models.Health(status=problem)
    return models.Health(status="ok")


@router.get(
    "/readyz",
    response_model=models.Health,
    responses={503: {"model": models.Health, "description": "database unreachable"}},
)
def readyz(db: DatabaseDep, response: Response) -> models.Health:
    """Ready when the database answers a query."""
    try:
        db.ping()
    except DatabaseError:
        response.status_code = 503
        return models.Health(status="database unreachable")
    return models.Health(status="ok")


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        401: errors.COMMON_RESPONSES[401],
        403: errors.COMMON_RESPONSES[403],  # a worker token
    },
)
def metrics(services: ServicesDep, principal: ScraperDep) -> Response:
    """Prometheus metrics. An admin or `metrics` (scrape) token reads every series; a
    member or viewer only its own queues' series and the GPU inventory (docs/api.md)."""
    return Response(render(services.metrics, principal), media_type=CONTENT_TYPE_LATEST)
