"""Errors the store raises; the API maps each to an HTTP status (see `api.errors`)."""

from __future__ import annotations

from sqlalchemy import exc as _sa_exc


class StoreError(Exception):
    """Base of every store error; `loc` names the field the error is about, if any."""

    loc: tuple[str | int, ...] = ()

    def __init__(self, message: str, *, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc


class NotFound(StoreError):
    """No such queue or job (or the caller may not know of it)."""


class Conflict(StoreError):
    """The request contradicts the current state (a queue with live jobs, a duplicate)."""


class VersionConflict(Conflict):
    """Optimistic concurrency: the row changed since the caller read `expected` version."""

    def __init__(self, job_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"job {job_id} is at version {actual}, not the expected {expected}",
            loc=("version",),
        )
        self.job_id = job_id
        self.expected = expected
        self.actual = actual


class InvalidTransition(Conflict):
    """A phase change the job's life cycle does not allow (e.g. Succeeded -> Running)."""


class IdempotencyMismatch(StoreError):
    """The same Idempotency-Key was used before with a different request body."""


class Invalid(StoreError):
    """A malformed argument the store itself detects (e.g. an unreadable cursor)."""


# A job that moved on meanwhile (changed, ended or deleted since it was read): a write to
# it is skipped, and the next cycle decides on what it has become.
MOVED_ON: tuple[type[StoreError], ...] = (VersionConflict, InvalidTransition, NotFound)


# The driver's errors, by names of the store's own, so the API imports no SQLAlchemy.
# Any database failure (`/readyz`):
DatabaseError = _sa_exc.SQLAlchemyError
# The database is unreachable, locked or its pool exhausted: worth a retry (a 503).
DATABASE_AWAY: tuple[type[Exception], ...] = (
    _sa_exc.OperationalError,
    _sa_exc.InterfaceError,
    _sa_exc.TimeoutError,
)
