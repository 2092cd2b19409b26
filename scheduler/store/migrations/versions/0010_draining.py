"""Attempts whose workers are still stopping, with where they hold GPUs (issue 25 item
1): the loop writes them, every view of the inventory shows them as draining.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "draining",
        sa.Column("job_id", sa.String(320), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("placements", sa.JSON(), nullable=False),
        sa.Column("grace_s", sa.Float(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("draining")
