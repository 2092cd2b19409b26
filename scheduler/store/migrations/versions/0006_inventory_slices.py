"""GPUs a node's device plugin shares as N equal MPS replicas (Kubernetes,
`nvidia.com/gpu.sharing-strategy=mps`): a column of the inventory, so that explain and
the dashboard, which build their snapshot from the store, place as the loop does.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inventory", sa.Column("slices", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    op.drop_column("inventory", "slices")
