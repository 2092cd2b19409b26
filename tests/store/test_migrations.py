"""Migrations: they create exactly the ORM's schema, and running them again is harmless."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from scheduler.store import db as store_db
from scheduler.store import schema


def test_migrations_match_the_models_and_rerun(database_url: str) -> None:
    database = store_db.open_database(database_url)
    store_db.migrate(database.engine)  # a second start: no-op
    with database.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": False})
        diff = compare_metadata(ctx, schema.Base.metadata)
        tables = set(inspect(conn).get_table_names())
    database.close()
    assert diff == []
    assert {"queues", "jobs", "job_events", "inventory", "scheduler_lease"} <= tables
