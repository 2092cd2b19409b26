"""Request and response bodies (pydantic v2), one family per entity: Create, Update,
Public and a list of Public. Create bodies are the shared specs of `scheduler.spec`, so the
REST API, the CRDs and the CLI validate alike. JSON field names are camelCase.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from scheduler.spec import JobSpec, Phase
from scheduler.spec.allowed import Allowances
from scheduler.spec.common import Priority
from scheduler.spec.queue import QueueSpec, QuotaSpec


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


QueueCreate = QueueSpec
JobCreate = JobSpec


class QueueUpdate(_Model):
    """PATCH: only the fields given change; `version` makes it conditional."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    parent: str | None = None
    guaranteed: QuotaSpec | None = None
    limit: QuotaSpec | None = None
    weight: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    priority: Priority | None = None
    allowed: Allowances | None = None
    version: int | None = Field(default=None, ge=1, le=2**31 - 1)


class QueuePublic(_Model):
    name: str
    parent: str | None
    guaranteed: dict[str, float | None]
    limit: dict[str, float | None] | None
    weight: float
    priority: int
    # What its jobs may ask of Kubernetes (scheduler.spec.allowed); null: the chart's.
    allowed: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime
    version: int
    # On create/update: promises the cluster cannot keep today (over-committed guarantees).
    warnings: list[str] = Field(default_factory=list)


class QueuesPublic(_Model):
    data: list[QueuePublic]
    count: int


class Placement(_Model):
    worker: int
    node: str
    gpus: list[int]
    fraction: float
    # How a GPU fraction is held to, as its node does it: "advisory" (the worker launcher's
    # cooperative memory cap; nothing stops a worker using more) or "mps" (CUDA MPS limits
    # its memory and SMs). None for whole GPUs and CPU-only workers: no fraction to enforce.
    enforcement: str | None = None

    @model_validator(mode="after")
    def _enforcement(self) -> Placement:
        if self.enforcement is None and self.gpus and self.fraction < 1.0:
            self.enforcement = "advisory"
        return self


def camel_keys(data: dict[str, Any]) -> dict[str, Any]:
    """The core's detail keys (snake_case) in the API's camelCase; nested maps are left
    as they are (their keys are names: nodes, queues)."""
    return {to_camel(k): v for k, v in data.items()}


class PendingReasonPublic(_Model):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("details")
    @classmethod
    def _camel(cls, v: dict[str, Any]) -> dict[str, Any]:
        return camel_keys(v)


class Condition(_Model):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


class StartEstimatePublic(_Model):
    """When a pending job is estimated to start (a forward replay of the cluster as it
    is, `docs/api.md`, "Estimated start"), and its place in its queue."""

    at: datetime | None = Field(description="null when unknown: `unknown` says why")
    position: int = Field(description="1-based, in its queue's pending order")
    basis: str = Field(description="what the estimate rests on")
    unknown: str = ""
    computed_at: datetime
    overdue: bool = Field(
        False,
        description="`at` has passed and the job still waits: the estimate proved wrong, "
        "and the estimator makes a new one",
    )


class ResizePublic(_Model):
    """One change of an elastic job's size (its `Resized` event)."""

    at: datetime
    attempt: int
    previous: int = Field(description="workers before")
    workers: int = Field(description="workers after")
    message: str


class JobPublic(_Model):
    id: str
    name: str
    queue: str
    submitter: str
    spec: JobSpec
    phase: Phase
    priority: int
    conditions: list[Condition]
    placements: list[Placement]
    workers: int = Field(description="workers it has now (an elastic job's current size)")
    resizes: list[ResizePublic] = Field(
        default_factory=list, description="an elastic job's changes of size, oldest first"
    )
    pending_reason: PendingReasonPublic | None
    estimated_start: StartEstimatePublic | None = None
    attempt: int
    restarts: int
    cancel_requested: bool
    created_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    version: int


class JobsPublic(_Model):
    data: list[JobPublic]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class JobEventPublic(_Model):
    at: datetime
    kind: str
    reason: str
    message: str
    data: dict[str, Any]

    @field_validator("data")
    @classmethod
    def _camel(cls, v: dict[str, Any]) -> dict[str, Any]:
        return camel_keys(v)


class JobEventsPublic(_Model):
    data: list[JobEventPublic]
    next_cursor: str | None = Field(
        default=None, description="pass as ?cursor= (with the same order) for the next page"
    )


class GpuShare(_Model):
    """One worker's share of a GPU; job and queue are null when hidden from the caller."""

    job_id: str | None
    queue: str | None
    worker: int
    fraction: float
    # A worker still stopping (its job ended or was preempted): it holds the share until
    # it is gone; `stopsInSeconds` is what is left of its grace period (0: overdue).
    draining: bool = False
    stops_in_seconds: int | None = None


class GpuPublic(_Model):
    index: int
    model: str
    memory_mib: int
    allocated: float
    free: float
    shares: list[GpuShare]


class TaintPublic(_Model):
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


class NodePublic(_Model):
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_model: str
    gpu_memory_mib: int
    # How GPU fractions placed here are held to their share: "advisory" or "mps".
    enforcement: str = "advisory"
    # What jobs' nodeSelector, affinity and tolerations are matched against.
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintPublic] = Field(default_factory=list)
    gpus: list[GpuPublic]


class NodesPublic(_Model):
    data: list[NodePublic]


class GpuTotals(_Model):
    total: float
    allocated: float  # draining included: those GPUs are not free
    idle: float
    draining: float = 0.0  # held by workers still stopping


class QueueUsage(_Model):
    name: str
    allocated: float
    guaranteed: float
    limit: float | None
    pending: int
    running: int


class ClusterSummary(_Model):
    gpus: GpuTotals
    by_model: dict[str, GpuTotals]
    queues: list[QueueUsage]
    pending: int
    jobs_by_phase: dict[str, int]


class Health(_Model):
    status: str
