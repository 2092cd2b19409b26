"""FastAPI dependencies: the app's services (`api.services`), a store session per request
and the authenticated caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api import auth
from api.errors import fail
from api.feasibility_cache import FeasibilitySnapshot
from api.services import Services, services_of
from scheduler import workertoken
from scheduler.store import tokens as store_tokens
from scheduler.store.db import Database, Session

_bearer = HTTPBearer(auto_error=False, description="a token from the API's token file")


# Dependencies that only read app state are `async def`: FastAPI runs a plain `def` one
# on the thread pool, a hop per dependency per request (measured in docs/benchmarks.md).
async def get_services(request: Request) -> Services:
    return services_of(request.app)


async def get_database(services: Annotated[Services, Depends(get_services)]) -> Database:
    return services.database


async def get_feasibility(
    services: Annotated[Services, Depends(get_services)],
) -> FeasibilitySnapshot:
    return services.feasibility


def get_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    with db.session() as session:
        yield session


def get_principal(
    services: Services, credentials: HTTPAuthorizationCredentials | None
) -> auth.Principal:
    unauthorized = {"WWW-Authenticate": "Bearer"}
    if credentials is None or credentials.scheme.lower() != "bearer":
        err = fail(
            401,
            "missing bearer token (Authorization: Bearer <token>)",
            loc=["header", "Authorization"],
        )
        err.headers = unauthorized
        raise err
    job = workertoken.verify(services.worker_key or "", credentials.credentials)
    if job is not None:
        return auth.Principal(f"worker:{job}", auth.Role.WORKER, frozenset(), job=job)
    principal = services.tokens.lookup(credentials.credentials)
    if principal is None:
        principal = _stored(services.database, credentials.credentials)
    if principal is None:
        err = fail(
            401,
            "unknown token: it is in neither this server's token file nor its "
            "`shoal tokens` (revoked, or from another server or an older state directory? "
            "`shoal serve` writes a fresh admin-token into its own state directory; the "
            "CLI reads it from SHOAL_STATE_DIR, else pass --token or SHOAL_TOKEN)",
            loc=["header", "Authorization"],
        )
        err.headers = unauthorized
        raise err
    why = auth.refusal(principal, services.wiring.team_tokens_refused)
    if why is not None:
        raise fail(403, why, loc=["header", "Authorization"])
    return principal


def _stored(db: Database, token: str) -> auth.Principal | None:
    """A token made with `POST /tokens` (looked up by digest)."""
    if not token.startswith(store_tokens.PREFIX):
        return None
    with db.session() as session:
        row = store_tokens.find_token(session=session, token=token)
        if row is None:
            return None
        return auth.Principal(row.user, auth.Role(row.role), frozenset(row.queues))


async def principal_of_request(
    services: Annotated[Services, Depends(get_services)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> auth.Principal:
    """`get_principal` on the event loop, except for a stored token (a database read),
    which goes to the thread pool: a token-file or worker token costs no thread hop."""
    if credentials is not None and credentials.credentials.startswith(store_tokens.PREFIX):
        return await run_in_threadpool(get_principal, services, credentials)
    return get_principal(services, credentials)


WORKER_ONLY = (
    "a worker token may only report its own job's progress "
    "(POST /api/v1/jobs/{id}/progress); it reads nothing"
)
METRICS_ONLY = "a metrics token may only read /metrics (a scrape credential); it reads nothing else"


async def require_reader(
    principal: Annotated[auth.Principal, Depends(principal_of_request)],
) -> auth.Principal:
    """A team or admin token: worker and metrics tokens are 403 with what they are for."""
    if principal.role is auth.Role.WORKER:
        raise fail(403, WORKER_ONLY, loc=["header", "Authorization"])
    if principal.role is auth.Role.METRICS:
        raise fail(403, METRICS_ONLY, loc=["header", "Authorization"])
    return principal


async def require_scraper(
    principal: Annotated[auth.Principal, Depends(principal_of_request)],
) -> auth.Principal:
    """Any token but a worker's (for /metrics)."""
    if principal.role is auth.Role.WORKER:
        raise fail(403, WORKER_ONLY, loc=["header", "Authorization"])
    return principal


async def require_admin(
    principal: Annotated[auth.Principal, Depends(principal_of_request)],
) -> auth.Principal:
    if principal.role is not auth.Role.ADMIN:
        raise fail(403, f"role {principal.role} may not change queues; admin only")
    return principal


SessionDep = Annotated[Session, Depends(get_session)]
DatabaseDep = Annotated[Database, Depends(get_database)]
# Every route reads with PrincipalDep (worker and metrics tokens refused) unless it says
# otherwise: AnyRoleDep for a worker's progress report, ScraperDep for /metrics.
PrincipalDep = Annotated[auth.Principal, Depends(require_reader)]
AnyRoleDep = Annotated[auth.Principal, Depends(principal_of_request)]
ScraperDep = Annotated[auth.Principal, Depends(require_scraper)]
AdminDep = Annotated[auth.Principal, Depends(require_admin)]
FeasibilityDep = Annotated[FeasibilitySnapshot, Depends(get_feasibility)]
ServicesDep = Annotated[Services, Depends(get_services)]
