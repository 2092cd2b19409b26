"""One error shape for every 4xx/5xx: {"detail": [{"loc": [...], "msg": ..., "type": ...}]}.

It is FastAPI's own validation-error shape, so clients parse one thing: `loc` names the
field (["body", "gpu"], ["query", "cursor"], ["header", "Idempotency-Key"]), or is empty
when the error is about the request as a whole (authentication, a missing route).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from scheduler.feasibility import Problem
from scheduler.store import errors

log = logging.getLogger(__name__)


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem]


class ApiError(Exception):
    """Raised by routes: an HTTP status with one or more field errors."""

    def __init__(
        self, status: int, items: Sequence[ErrorItem], headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(items[0].msg if items else "")
        self.status = status
        self.items = list(items)
        self.headers = headers


def fail(status: int, msg: str, *, loc: Sequence[str | int] = (), type: str = "error") -> ApiError:
    return ApiError(status, [ErrorItem(loc=list(loc), msg=msg, type=type)])


def feasibility_error(problems: Sequence[Problem]) -> ApiError:
    return ApiError(
        422, [ErrorItem(loc=["body", *p.loc], msg=p.msg, type="admission") for p in problems]
    )


def _body(items: Sequence[ErrorItem]) -> dict[str, object]:
    return ErrorBody(detail=list(items)).model_dump()


def response(
    status: int, items: Sequence[ErrorItem], headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(_body(items), status_code=status, headers=headers)


_STORE_STATUS: list[tuple[type[errors.StoreError], int, str]] = [
    (errors.NotFound, 404, "not_found"),
    (errors.Conflict, 409, "conflict"),
    (errors.IdempotencyMismatch, 422, "idempotency_mismatch"),
    (errors.Invalid, 422, "invalid"),
]


def _store_loc(exc: errors.StoreError) -> list[str | int]:
    loc = list(exc.loc)
    return loc if not loc or loc[0] in ("path", "query", "header", "body") else ["body", *loc]


DATABASE_RETRY_AFTER_S = 5


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the shape above."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return response(exc.status, exc.items, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        items = [
            ErrorItem(loc=list(e.get("loc", ())), msg=str(e.get("msg", "")), type=e["type"])
            for e in exc.errors()
        ]
        return response(422, items)

    @app.exception_handler(ValidationError)
    async def _merged(_: Request, exc: ValidationError) -> JSONResponse:
        # A body valid on its own that makes an invalid whole (a PATCH merged into a queue).
        items = [
            ErrorItem(loc=["body", *e["loc"]], msg=e["msg"], type=e["type"]) for e in exc.errors()
        ]
        return response(422, items)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            # Starlette's Allow names only the first route on the path: name them all.
            # OPTIONS on a path that exists is answered, not refused (RFC 9110 9.3.7).
            allow = ", ".join(allowed_methods(request))
            if request.method == "OPTIONS":
                return Response(status_code=204, headers={"Allow": allow})
            headers = {**(headers or {}), "Allow": allow}
        return response(
            exc.status_code, [ErrorItem(loc=[], msg=str(exc.detail), type="http")], headers
        )

    @app.exception_handler(errors.StoreError)
    async def _store(_: Request, exc: errors.StoreError) -> JSONResponse:
        for kind, status, name in _STORE_STATUS:
            if isinstance(exc, kind):
                return response(
                    status, [ErrorItem(loc=_store_loc(exc), msg=exc.message, type=name)]
                )
        return response(409, [ErrorItem(loc=_store_loc(exc), msg=exc.message, type="store")])

    async def _database_away(_: Request, exc: Exception) -> JSONResponse:
        # The database is unreachable (or locked, or the pool is exhausted): try again soon.
        log.warning("database unavailable: %s", str(exc).splitlines()[0][:200])
        item = ErrorItem(loc=[], msg="the database is unavailable; retry", type="unavailable")
        return response(503, [item], {"Retry-After": str(DATABASE_RETRY_AFTER_S)})

    for away in errors.DATABASE_AWAY:
        app.add_exception_handler(away, _database_away)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return response(500, [ErrorItem(loc=[], msg="internal error", type="internal")])


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path, and OPTIONS: each method is
    tried against the app's routes as the router would (HEAD is not served: not listed)."""
    served = []
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.routes):
            served.append(method)
    return [*served, "OPTIONS"]


# Declared on every route so the OpenAPI document lists the statuses the API can return.
COMMON_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorBody, "description": "the body could not be read (e.g. not UTF-8)"},
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    403: {"model": ErrorBody, "description": "the token's role may not do this"},
    404: {"model": ErrorBody, "description": "no such object (or not visible to the caller)"},
    409: {"model": ErrorBody, "description": "conflicts with the current state"},
    413: {"model": ErrorBody, "description": "request body too large"},
    422: {"model": ErrorBody, "description": "invalid input; `loc` names the field"},
}
