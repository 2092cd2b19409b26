"""API tokens (admin only): `POST /tokens` makes one and shows it once, `GET /tokens`
lists them (never the secret), `DELETE /tokens/{id}` revokes one at once. Only sha256
digests are stored (`scheduler.store.tokens`). Tokens of the operator's token file are
not listed here: that file is theirs."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Path, status
from pydantic import Field, field_validator

from api.auth import ALL, Principal, Role, refusal
from api.deps import AdminDep, ServicesDep, SessionDep
from api.errors import fail
from api.models import _Model
from scheduler.spec.text import UserInput
from scheduler.store import tokens
from scheduler.store.queues import list_queues

router = APIRouter(prefix="/tokens", tags=["tokens"])
TokenId = Path(min_length=1, max_length=16)


class TokenCreate(_Model, UserInput):
    """No NUL or lone surrogate in `user` or `queues` (`UserInput`)."""

    user: str = Field(min_length=1, max_length=128)
    role: Role = Role.MEMBER
    queues: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("role")
    @classmethod
    def _not_worker(cls, v: Role) -> Role:
        if v is Role.WORKER:
            raise ValueError("worker tokens are minted per job by the scheduler")
        return v

    @field_validator("queues")
    @classmethod
    def _queues(cls, v: list[str]) -> list[str]:
        for q in v:
            if not q or len(q) > 63 or "\x00" in q:
                raise ValueError(f"{q!r} is not a queue name (or {ALL!r} for all)")
        return v


class TokenPublic(_Model):
    id: str
    user: str
    role: Role
    queues: list[str]
    created_by: str
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="the bearer token: shown this once, stored only as a digest")
    refused: str | None = Field(
        default=None,
        description="why this server answers the token 403 (a team token where its workers "
        "would run as its own OS user), or null: it works",
    )


class TokensPublic(_Model):
    data: list[TokenPublic]


def _public(row: tokens.TokenRow) -> TokenPublic:
    return TokenPublic(
        id=row.id,
        user=row.user,
        role=Role(row.role),
        queues=list(row.queues),
        created_by=row.created_by,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


@router.post("", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token(
    body: TokenCreate, session: SessionDep, admin: AdminDep, services: ServicesDep
) -> TokenCreated:
    """A new token for `user` with `role` in `queues`; the response is the only place the
    token itself is ever shown. It is made even where this server refuses it (`refused`
    says why): the refusal lifts once the admin fixes its cause."""
    if body.role not in (Role.ADMIN, Role.METRICS) and not body.queues:
        raise fail(422, 'a member or viewer token needs queues (or ["*"])', loc=["body", "queues"])
    # A token for a queue that does not exist would open nothing: a typo, said at once.
    known = {q.name for q in list_queues(session=session, names=body.queues)}
    for i, q in enumerate(body.queues):
        if q != ALL and q not in known:
            raise fail(422, f"queue {q!r} does not exist", loc=["body", "queues", i])
    row, secret = tokens.create_token(
        session=session,
        user=body.user,
        role=str(body.role),
        queues=body.queues,
        created_by=admin.user,
    )
    who = Principal(row.user, Role(row.role), frozenset(row.queues))
    why = refusal(who, services.wiring.team_tokens_refused)
    return TokenCreated(**_public(row).model_dump(), token=secret, refused=why)


@router.get("", response_model=TokensPublic)
def list_tokens(session: SessionDep, _: AdminDep) -> TokensPublic:
    """Every token made here, revoked ones with `revokedAt` (no secrets)."""
    return TokensPublic(data=[_public(r) for r in tokens.list_tokens(session=session)])


@router.delete("/{token_id}", response_model=TokenPublic)
def revoke_token(session: SessionDep, _: AdminDep, token_id: str = TokenId) -> TokenPublic:
    """Revoke at once: the next request with it is 401."""
    return _public(tokens.revoke_token(session=session, token_id=token_id))
