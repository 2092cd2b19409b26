"""Every table of the first version: queues, jobs, job_events, inventory, scheduler_lease.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("parent", sa.String(63), sa.ForeignKey("queues.name", ondelete="RESTRICT")),
        sa.Column("guaranteed", sa.JSON(), nullable=False),
        sa.Column("limit", sa.JSON(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_queues_parent", "queues", ["parent"])
    op.create_table(
        "jobs",
        sa.Column("seq", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False, unique=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("submitter", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("conditions", sa.JSON(), nullable=False),
        sa.Column("placements", sa.JSON(), nullable=False),
        sa.Column("pending_code", sa.String(32)),
        sa.Column("pending_message", sa.Text()),
        sa.Column("pending_details", sa.JSON()),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("scheduled_at", _TS),
        sa.Column("started_at", _TS),
        sa.Column("finished_at", _TS),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.UniqueConstraint("submitter", "idempotency_key", name="uq_jobs_idempotency"),
    )
    op.create_index("ix_jobs_queue_seq", "jobs", ["queue", "seq"])
    op.create_index("ix_jobs_phase", "jobs", ["phase"])
    op.create_table(
        "job_events",
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("at", _TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id"])
    op.create_table(
        "inventory",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("cpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(128), nullable=False),
        sa.Column("gpu_memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("seen_at", _TS, nullable=False),
    )
    lease = op.create_table(
        "scheduler_lease",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("holder", sa.String(253), nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
    )
    # The one lease row exists from the start, so acquiring is a single conditional UPDATE.
    op.bulk_insert(lease, [{"id": 1, "holder": "", "expires_at": datetime(1970, 1, 1)}])


def downgrade() -> None:
    for table in ("scheduler_lease", "inventory", "job_events", "jobs", "queues"):
        op.drop_table(table)
