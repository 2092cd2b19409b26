"""When an elastic job last changed size (issue 29 part 2): the core grows a job again
only `resize_interval_s` after; its history is in its `Resized` events.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("resized_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resized_at")
