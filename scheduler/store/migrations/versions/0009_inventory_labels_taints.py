"""A node's labels and taints (`Node.labels`, `Node.taints`), for jobs' nodeSelector,
node affinity and tolerations: columns of the inventory, so that explain and the
dashboard, which build their snapshot from the store, place as the loop does.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("inventory", sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))
    op.add_column("inventory", sa.Column("taints", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    op.drop_column("inventory", "taints")
    op.drop_column("inventory", "labels")
