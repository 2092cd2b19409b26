"""Alembic migrations of the store; run by `scheduler.store.db.migrate`."""
