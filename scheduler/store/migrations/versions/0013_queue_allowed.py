"""What a queue's jobs may ask of Kubernetes (issue 37 item 3): its `allowed`
PriorityClasses, tolerations and node labels, as the spec's JSON; null: the chart's.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("queues", sa.Column("allowed", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("allowed")
