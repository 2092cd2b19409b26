"""What each node could hold if empty (cordoned and NotReady nodes included): the
`node_capacity` table, beside the inventory's free room, so admission refuses only what
no node could ever hold (issue 24).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_capacity",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("cpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(128), nullable=False),
        sa.Column("gpu_memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("enforcement", sa.String(16), nullable=False, server_default="advisory"),
        sa.Column("slices", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_capacity")
