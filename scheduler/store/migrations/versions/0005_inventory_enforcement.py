"""How each node holds GPU fractions to their share (`advisory`, or `mps` where an MPS
daemon or an MPS-sharing device plugin enforces them): a column of the inventory, so the
API and the dashboard report a placement's enforcement from what its node does.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inventory",
        sa.Column("enforcement", sa.String(16), nullable=False, server_default="advisory"),
    )


def downgrade() -> None:
    op.drop_column("inventory", "enforcement")
