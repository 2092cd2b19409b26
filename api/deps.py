"""FastAPI dependencies: a store session per request and the authenticated caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api import auth
from api.errors import fail
from scheduler.store.db import Database

_bearer = HTTPBearer(auto_error=False, description="a token from the API's token file")


def get_database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


def get_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    with db.session() as session:
        yield session


def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
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
    tokens: auth.TokenTable = request.app.state.tokens
    principal = tokens.lookup(credentials.credentials)
    if principal is None:
        err = fail(401, "unknown token", loc=["header", "Authorization"])
        err.headers = unauthorized
        raise err
    return principal


def require_admin(principal: Annotated[auth.Principal, Depends(get_principal)]) -> auth.Principal:
    if principal.role is not auth.Role.ADMIN:
        raise fail(403, f"role {principal.role} may not change queues; admin only")
    return principal


SessionDep = Annotated[Session, Depends(get_session)]
DatabaseDep = Annotated[Database, Depends(get_database)]
PrincipalDep = Annotated[auth.Principal, Depends(get_principal)]
AdminDep = Annotated[auth.Principal, Depends(require_admin)]
