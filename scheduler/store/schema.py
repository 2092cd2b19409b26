"""The store's tables as SQLAlchemy 2.x typed ORM classes.

Only `scheduler.store` imports this module. Alembic migrations in `migrations/versions`
create and change these tables; a change here needs a new revision there (the test
`tests/store/test_migrations.py` compares the two).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from scheduler.spec import Origin, Phase

# SQLite has no 64-bit autoincrement unless the column is exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out, on SQLite too (which keeps no time zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: UTCDateTime}


class QueueRow(Base):
    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    parent: Mapped[str | None] = mapped_column(
        String(63), ForeignKey("queues.name", ondelete="RESTRICT"), index=True
    )
    # {"total": 8.0, "H100": 4.0}; limit None means unlimited
    guaranteed: Mapped[dict[str, Any]]
    limit: Mapped[dict[str, Any] | None]
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # What its jobs may ask of Kubernetes (`scheduler.spec.allowed.Allowances` as JSON).
    allowed: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    version: Mapped[int] = mapped_column(Integer, default=1)


# A name is unique among a queue's live jobs (finished ones free it): a partial index, so
# two racing submissions cannot both win (migration 0003).
FINISHED_PHASES = (Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value)
LIVE = text("phase NOT IN ({})".format(", ".join(f"'{p}'" for p in FINISHED_PHASES)))


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("submitter", "idempotency_key", name="uq_jobs_idempotency"),
        Index(
            "uq_jobs_live_name",
            "queue",
            "name",
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        ),
        Index("ix_jobs_queue_seq", "queue", "seq"),
        Index("ix_jobs_phase", "phase"),
        Index("ix_jobs_origin", "origin_kind", "origin_namespace"),
    )

    # `seq` orders jobs (newest first) and is the pagination cursor; `id` is public.
    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(63))
    queue: Mapped[str] = mapped_column(String(63))  # no FK: history outlives a queue
    submitter: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]]
    priority: Mapped[int] = mapped_column(Integer)  # effective: spec's, else the queue's
    phase: Mapped[str] = mapped_column(String(16))
    conditions: Mapped[list[Any]]
    placements: Mapped[list[Any]]  # [{"worker", "node", "gpus", "fraction"}]
    pending_code: Mapped[str | None] = mapped_column(String(32))
    pending_message: Mapped[str | None] = mapped_column(Text)
    pending_details: Mapped[dict[str, Any] | None]
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime]
    scheduled_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    resized_at: Mapped[datetime | None]  # an elastic job's last resize (migration 0012)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer, default=1)
    # The object the job was submitted as (a TrainingJob), when it was (migration 0004):
    # `scheduler.spec.Origin` in columns, so no one parses the submitter or the key.
    origin_kind: Mapped[str | None] = mapped_column(String(63))
    origin_namespace: Mapped[str | None] = mapped_column(String(63))
    origin_name: Mapped[str | None] = mapped_column(String(63))
    origin_uid: Mapped[str | None] = mapped_column(String(64))

    @property
    def origin(self) -> Origin | None:
        if self.origin_kind is None:
            return None
        return Origin(
            self.origin_kind,
            self.origin_namespace or "",
            self.origin_name or "",
            self.origin_uid or "",
        )


class JobEventRow(Base):
    """Append-only history of a job: nothing updates these rows; only old Progress events
    are deleted (`events.prune_events`), besides the job's own deletion."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]]


class ApiTokenRow(Base):
    """A bearer token an admin made through the API (`scheduler.store.tokens`); only its
    sha256 digest is kept. Revoked tokens stay listed, with `revoked_at`."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    queues: Mapped[list[Any]]
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class _NodeColumns:
    """What a node row holds in both tables (its GPUs are all of one model)."""

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    cpu_milli: Mapped[int] = mapped_column(BigInteger)
    memory_mib: Mapped[int] = mapped_column(BigInteger)
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str] = mapped_column(String(128))
    gpu_memory_mib: Mapped[int] = mapped_column(BigInteger)
    # How fractions are held to there (`scheduler.model.Enforcement`): advisory, mps...
    enforcement: Mapped[str] = mapped_column(
        String(16), default="advisory", server_default="advisory"
    )
    # GPUs shared as this many equal MPS replicas by the device plugin (0: not shared).
    slices: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    seen_at: Mapped[datetime]


class InventoryRow(_NodeColumns, Base):
    """A node as the scheduler last saw it: the free room it offers now."""

    __tablename__ = "inventory"

    # Why no fraction may go here now (`Node.no_sharing`); empty: they may.
    no_sharing: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Its labels ({key: value}) and taints ([{key, value, effect}]), for jobs' node rules.
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    taints: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")


class CapacityRow(_NodeColumns, Base):
    """A node as it would be empty: its allocatable capacity, cordoned and NotReady nodes
    included. Admission judges "can never run" against these, never against the free
    room the loop saw (`InventoryRow`), which foreign pods and cordons shrink."""

    __tablename__ = "node_capacity"


class DrainingRow(Base):
    """An attempt whose workers are still stopping (cancelled, preempted, failed, past
    maxRuntime): they hold their GPUs until gone. Written by the loop when the set
    changes, so every view of the inventory shows them as draining, not idle."""

    __tablename__ = "draining"

    # A job id, or an adopted foreign pod's `pod:<namespace>/<name>`.
    job_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue: Mapped[str] = mapped_column(String(63))
    placements: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    grace_s: Mapped[float] = mapped_column(Float)
    since: Mapped[datetime]


class EstimateRow(Base):
    """When a pending job is estimated to start, and its place in its queue (issue 29):
    written by the scheduler's estimator beside the loop, read by every front door."""

    __tablename__ = "start_estimates"

    job_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    start_at: Mapped[datetime | None] = mapped_column(nullable=True)
    position: Mapped[int] = mapped_column(Integer)
    basis: Mapped[str] = mapped_column(Text, default="")
    unknown: Mapped[str] = mapped_column(Text, default="")  # why there is no estimate
    computed_at: Mapped[datetime]


class LeaseRow(Base):
    """The single scheduling lease: one row (id 1), created by the first migration."""

    __tablename__ = "scheduler_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(253), default="")
    expires_at: Mapped[datetime]
