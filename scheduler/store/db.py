"""Engines, sessions and migrations: `open_database(url)` is how every process gets a store.

SQLite (the embedded default; a file URL such as `sqlite:///var/shoal.db`) gets WAL mode,
a busy timeout and foreign keys on every connection. PostgreSQL is reached with psycopg 3
(`postgresql+psycopg://user@host:port/db`). Alembic migrations run programmatically on
open, so a fresh file or database is usable at once and an old one is upgraded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

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


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to `revision` with the migrations inside this package."""
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files(__package__) / "migrations"))
    with engine.begin() as conn:
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
