"""Start-time estimates of pending jobs (issue 29 part 1): the estimator writes them
beside the loop, the API, CLI and dashboard read them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "start_estimates",
        sa.Column("job_id", sa.String(320), primary_key=True),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("basis", sa.Text(), nullable=False, server_default=""),
        sa.Column("unknown", sa.Text(), nullable=False, server_default=""),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("start_estimates")
