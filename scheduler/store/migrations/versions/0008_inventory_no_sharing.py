"""Why no GPU fraction may go to a node now (`Node.no_sharing`: on Kubernetes, a GPU
reservation found no GPU in its container): a column of the inventory, so that explain
and the dashboard, which build their snapshot from the store, place as the loop does.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inventory", sa.Column("no_sharing", sa.Text(), nullable=False, server_default="")
    )


def downgrade() -> None:
    op.drop_column("inventory", "no_sharing")
