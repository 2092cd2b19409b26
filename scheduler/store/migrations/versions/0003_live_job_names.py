"""A name is unique among a queue's live jobs, enforced by the database: a partial unique
index on jobs(queue, name) over the phases that are not finished. The API checked it
before inserting, which two simultaneous submissions could both pass.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_LIVE = "phase NOT IN ('Succeeded', 'Failed', 'Cancelled')"


def upgrade() -> None:
    clash = (
        op.get_bind()
        .execute(
            sa.text(
                f"SELECT queue, name, COUNT(*) FROM jobs WHERE {_LIVE} "
                "GROUP BY queue, name HAVING COUNT(*) > 1"
            )
        )
        .all()
    )
    if clash:
        # Renaming a user's job is not ours to do: say which, and let them cancel one.
        names = ", ".join(f"{queue}/{name} ({n} live)" for queue, name, n in clash)
        raise RuntimeError(
            f"live jobs share a name in one queue: {names}; cancel all but one of each, "
            "then upgrade again"
        )
    op.create_index(
        "uq_jobs_live_name",
        "jobs",
        ["queue", "name"],
        unique=True,
        sqlite_where=sa.text(_LIVE),
        postgresql_where=sa.text(_LIVE),
    )


def downgrade() -> None:
    op.drop_index("uq_jobs_live_name", table_name="jobs")
