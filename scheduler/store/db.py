"""Engines, sessions and migrations: `open_database(url)` is how every process gets a store.

SQLite (the embedded default; a file URL such as `sqlite:///var/shoal.db`) gets WAL mode,
a busy timeout and foreign keys on every connection. PostgreSQL is reached with psycopg 3
(`postgresql+psycopg://user@host:port/db`). Alembic migrations run programmatically on
open, so a fresh file or database is usable at once and an old one is upgraded.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

# `Session` is re-exported: modules outside the store type their sessions with it and
# never import SQLAlchemy themselves (importlinter contracts).
__all__ = [
    "PG_MIGRATION_LOCK",
    "POOL_OVERFLOW",
    "POOL_SIZE",
    "SQLITE_BUSY_TIMEOUT_MS",
    "Database",
    "Session",
    "make_engine",
    "migrate",
    "open_database",
]

SQLITE_BUSY_TIMEOUT_MS = 10_000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (the API) run while the scheduler loop writes.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


# Connections kept open: about as many as the API lets run at once (api.overload) plus
# the loop's. SQLAlchemy's default (5, and 10 more opened and closed again per use) made
# a loaded server reconnect, and rerun the pragmas, on most requests.
POOL_SIZE = 16
POOL_OVERFLOW = 16


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for `url` with Shoal's connection settings (no migration)."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if (
        "poolclass" not in kwargs
        and ":memory:" not in url
        and url not in ("sqlite://", "sqlite:///")
    ):
        kwargs.setdefault("pool_size", POOL_SIZE)
        kwargs.setdefault("max_overflow", POOL_OVERFLOW)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


# Replicas starting on a fresh database migrate it at once: one at a time, or the second
# fails creating a table the first made. Alembic's `context` is process-global, so threads
# of one process take turns too.
_MIGRATING = threading.Lock()
PG_MIGRATION_LOCK = 7_205_125_001  # the pg_advisory_xact_lock key: any fixed 64-bit number


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """An exclusive lock on `<database>.migrate-lock` (flock: released if the process
    dies); nothing for an in-memory database or another dialect."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        yield
        return
    with open(f"{path}.migrate-lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to `revision` with the migrations inside this package. Safe to
    run from several processes at once: each waits for the one before (PostgreSQL: an
    advisory lock held by the migration's transaction; SQLite: a file lock), then finds
    the schema at `revision` and does nothing."""
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files(__package__) / "migrations"))
    with _MIGRATING, _sqlite_file_lock(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


@dataclass
class Database:
    """An engine plus a session factory; sessions keep loaded objects after commit."""

    engine: Engine
    sessions: sessionmaker[Session]

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session; the store's functions commit their own transactions."""
        with self.sessions() as s:
            yield s

    def ping(self) -> None:
        """Raises if the database cannot be reached (for /readyz)."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()


def open_database(url: str, *, run_migrations: bool = True, **engine_kwargs: Any) -> Database:
    """Connect to `url` and (by default) bring its schema to the newest revision."""
    engine = make_engine(url, **engine_kwargs)
    if run_migrations:
        migrate(engine)
    return Database(engine, sessionmaker(engine, expire_on_commit=False))
