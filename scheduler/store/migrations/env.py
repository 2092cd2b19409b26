"""Alembic environment: runs on the connection `scheduler.store.db.migrate` hands in.

Online only; a URL may also come from `sqlalchemy.url` for the alembic CLI.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from scheduler.store import schema


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=schema.Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        _run(conn)


run_migrations_online()
