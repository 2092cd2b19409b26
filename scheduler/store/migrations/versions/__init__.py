"""Alembic revisions, oldest first (0001 creates every table)."""
