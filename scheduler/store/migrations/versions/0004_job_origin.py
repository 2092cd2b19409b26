"""Where a job came from, in columns of its own: the TrainingJob (kind, namespace, name,
uid) a CR-submitted job was made from. Before, the CR watcher and the kubernetes runtime
parsed it back out of the submitter ("crd:<ns>") and the idempotency key ("cr:<uid>").
Existing CR jobs are filled in from those strings, once, here.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("origin_kind", sa.String(63)))
    op.add_column("jobs", sa.Column("origin_namespace", sa.String(63)))
    op.add_column("jobs", sa.Column("origin_name", sa.String(63)))
    op.add_column("jobs", sa.Column("origin_uid", sa.String(64)))
    op.create_index("ix_jobs_origin", "jobs", ["origin_kind", "origin_namespace"])
    # A key "cr:<ns>/<name>" was a CR read without a uid: no uid, so no owner reference.
    op.execute(
        "UPDATE jobs SET origin_kind = 'TrainingJob', origin_namespace = substr(submitter, 5), "
        "origin_name = name, origin_uid = CASE WHEN idempotency_key LIKE 'cr:%/%' THEN '' "
        "ELSE substr(idempotency_key, 4) END "
        "WHERE submitter LIKE 'crd:%' AND idempotency_key LIKE 'cr:%'"
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_origin", table_name="jobs")
    for column in ("origin_uid", "origin_name", "origin_namespace", "origin_kind"):
        op.drop_column("jobs", column)
