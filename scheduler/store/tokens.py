"""API tokens made at run time: create (the token is returned once, only its sha256
digest is stored), look up by digest, list, revoke. The API's auth checks these after
the operator's token file (`api.auth.TokenTable`)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.store import errors, schema

PREFIX = "shoal_"
TokenRow = schema.ApiTokenRow  # for callers outside the store (which never import schema)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    *,
    session: Session,
    user: str,
    role: str,
    queues: Sequence[str],
    created_by: str,
    now: datetime | None = None,
) -> tuple[schema.ApiTokenRow, str]:
    """A new token; returns (row, the token itself: shown to the caller once)."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = schema.ApiTokenRow(
        id=uuid.uuid4().hex[:16],
        digest=digest(token),
        user=user,
        role=role,
        queues=list(queues),
        created_by=created_by,
        created_at=now or schema.utcnow(),
        revoked_at=None,
    )
    session.add(row)
    session.commit()
    return row, token


def find_token(*, session: Session, token: str) -> schema.ApiTokenRow | None:
    """The live (not revoked) token row of `token`, by its digest."""
    row = session.scalars(
        select(schema.ApiTokenRow).where(schema.ApiTokenRow.digest == digest(token))
    ).first()
    return row if row is not None and row.revoked_at is None else None


def list_tokens(*, session: Session) -> list[schema.ApiTokenRow]:
    return list(session.scalars(select(schema.ApiTokenRow).order_by(schema.ApiTokenRow.created_at)))


def revoke_token(
    *, session: Session, token_id: str, now: datetime | None = None
) -> schema.ApiTokenRow:
    row = session.get(schema.ApiTokenRow, token_id)
    if row is None:
        raise errors.NotFound(f"token {token_id} does not exist", loc=("path", "token_id"))
    if row.revoked_at is None:
        row.revoked_at = now or schema.utcnow()
        session.commit()
    return row
