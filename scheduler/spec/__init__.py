"""User-facing specs of queues and jobs (pydantic v2): the one validation shared by the
REST API, the TrainingJob/Queue CRD controller and the CLI.

Field names are the camelCase of the REST API and the CRDs; Python attributes are
snake_case. Checks that need the store or the cluster (unknown queue, a request no node
could hold) live in `scheduler.admission`, which takes these specs plus that context.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from scheduler.spec import nodes
from scheduler.spec.text import UserInput

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# What Kubernetes accepts as an environment variable name (and a process can be given).
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
MAX_ENV_NAME = 253
# `JobSpec.model_validate(data, context=STORED)`: a spec read back from the store, checked
# when it was submitted. Checks added since (env names, NUL bytes) do not make an old job
# unreadable: its launch fails instead, as that job's failure with the reason.
STORED = {"stored": True}
MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_MIB_PER_UNIT = {
    None: 1 / (1024 * 1024),
    "Ki": 1 / 1024,
    "K": 1000 / (1024 * 1024),
    "Mi": 1.0,
    "M": 1e6 / (1024 * 1024),
    "Gi": 1024.0,
    "G": 1e9 / (1024 * 1024),
    "Ti": 1024.0 * 1024,
    "T": 1e12 / (1024 * 1024),
}

MAX_CPU_MILLI = 10**9  # sanity bounds: larger numbers are typos and overflow columns
MAX_MEMORY_MIB = 1024**3
MAX_RUNTIME_S = 366 * 24 * 3600  # a year: larger runtimes overflow deadline arithmetic
MIN_GPU_FRACTION = 0.01  # finer shares are noise (and overflow capacity sums)

# Priorities are stored in 32-bit integer columns.
Priority = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]

Name = Annotated[str, Field(min_length=1, max_length=63, description="DNS-1123 label")]


def parse_memory_mib(value: str | int) -> int:
    """'16Gi' -> 16384; a bare number is bytes, as in Kubernetes quantities."""
    if isinstance(value, int):
        return value // (1024 * 1024)
    m = MEMORY.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a memory quantity such as 512Mi or 16Gi")
    mib = float(m.group(1)) * _MIB_PER_UNIT[m.group(2)]
    if not math.isfinite(mib) or mib > MAX_MEMORY_MIB * 1024:
        raise ValueError(f"{value[:40]!r} is too large a memory quantity (at most 1Pi)")
    return int(mib)


def parse_cpu_milli(value: str | float) -> int:
    """'500m' -> 500, 2 -> 2000."""
    if isinstance(value, (int, float)):
        if not math.isfinite(value * 1000):
            raise ValueError(f"{value!r} is not a CPU quantity such as 500m or 2")
        return round(value * 1000)
    v = value.strip()
    if v.endswith("m") and v[:-1].isdigit():
        return int(v[:-1])
    try:
        return round(float(v) * 1000)
    except (ValueError, OverflowError):
        raise ValueError(f"{value!r} is not a CPU quantity such as 500m or 2") from None


def _dns1123(value: str) -> str:
    if not DNS1123_LABEL.match(value):
        raise ValueError(
            "must be a DNS-1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


class _Spec(UserInput):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,  # NaN/Infinity pass json.loads but are no quantity
    )


class Framework(StrEnum):
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"
    GENERIC = "generic"

    @property
    def speaks_nccl(self) -> bool:
        """Whether its workers are ranks of one NCCL communicator on GPUs (by default)."""
        return self in (Framework.PYTORCH, Framework.TENSORFLOW)


class Enforcement(StrEnum):
    """What a job asks of its GPU fractions: `required`, only where a node enforces them
    (MPS); unset, advisory is enough (the worker launcher's cooperative cap)."""

    REQUIRED = "required"


class Phase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


# The most GPUs a guarantee or limit may name: beyond any cluster, short of the huge
# numbers (1e308) that flatten every bar and fair-share figure (issue 25 item 2).
MAX_QUOTA_GPUS = 1_000_000


class QuotaSpec(_Spec):
    """GPUs in total and per model: `{total: 8, H100: 4}` (also accepts a bare number)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    # strict: `{"total": false}` is no GPU count (lax mode would read it as 0)
    total: float | None = Field(default=None, ge=0, le=MAX_QUOTA_GPUS, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _number_is_total(cls, data: Any) -> Any:
        return {"total": data} if isinstance(data, (int, float)) else data

    @model_validator(mode="after")
    def _models_non_negative(self) -> QuotaSpec:
        for model, amount in (self.model_extra or {}).items():
            if (
                not isinstance(amount, (int, float))
                or isinstance(amount, bool)
                or not math.isfinite(amount)
                or not 0 <= amount <= MAX_QUOTA_GPUS
            ):
                raise ValueError(f"{model}: GPU amount must be a number in [0, {MAX_QUOTA_GPUS}]")
        return self

    @property
    def by_model(self) -> dict[str, float]:
        return {k: float(v) for k, v in (self.model_extra or {}).items()}


class QueueSpec(_Spec):
    name: Name
    parent: str | None = None
    guaranteed: QuotaSpec = Field(default_factory=QuotaSpec)
    limit: QuotaSpec | None = None
    weight: float = Field(default=1.0, gt=0)
    priority: Priority = 0

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dns1123(v)


class JobSpec(_Spec):
    name: Name
    queue: Name
    framework: Framework = Framework.PYTORCH
    image: str = Field(min_length=1)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    workers: int = Field(default=1, ge=1, le=4096)
    # The minimum is in the schema too, so OpenAPI and CRD clients see what the API refuses.
    gpu: float | None = Field(default=None, ge=MIN_GPU_FRACTION, strict=True)  # true is no GPU
    gpu_memory: str | None = None
    cpu: str | float = "1"
    memory: str = "2Gi"
    gpu_type: list[str] = Field(default_factory=list)
    distinct_gpus: bool | None = Field(
        default=None,
        description="one GPU holds at most one worker of this job (NCCL ranks cannot share "
        "a device); default true for pytorch and tensorflow, false otherwise. Set false "
        "for gloo or one process per job",
    )
    enforcement: Enforcement | None = Field(
        default=None,
        description="required: fractional workers run only on nodes that enforce their "
        "share (MPS), else the job waits with that reason; unset: advisory is enough",
    )
    priority: Priority | None = None
    preemptible: bool | None = None
    max_runtime: int | None = Field(default=None, gt=0, le=MAX_RUNTIME_S, description="seconds")
    backoff_limit: int = Field(default=0, ge=0, le=100)
    termination_grace_period_seconds: int = Field(default=30, ge=0, le=3600)
    node_selector: dict[str, str] | None = Field(
        default=None, description="labels a node must have (as a pod's nodeSelector)"
    )
    tolerations: list[nodes.Toleration] | None = Field(
        default=None, description="taints the workers tolerate (as a pod's tolerations)"
    )
    affinity: nodes.Affinity | None = Field(
        default=None,
        description="nodeAffinity (required, and preferred: those nodes first), as a pod's",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        json_schema_extra={"pattern": DNS1123_SUBDOMAIN.pattern},
        description="Kubernetes PriorityClass of the worker pods (it must exist); unset: "
        "the cluster's worker default. kube-scheduler and kubelet eviction use it; "
        "Shoal's own ordering and preemption use `priority`",
    )

    @field_validator("priority_class_name")
    @classmethod
    def _priority_class(cls, v: str | None) -> str | None:
        if v is not None and not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(
                "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')"
            )
        return v

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return nodes.node_selector(v)

    @field_validator("name", "queue")
    @classmethod
    def _names(cls, v: str) -> str:
        return _dns1123(v)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not v.strip() or any(c.isspace() for c in v):
            raise ValueError("must be a container image reference without spaces")
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: float | None) -> float | None:
        if v is not None and v > 1 and v != int(v):
            raise ValueError("must be a fraction in (0, 1] or a whole number of GPUs")
        if v is not None and v < MIN_GPU_FRACTION:
            raise ValueError(f"a GPU fraction must be at least {MIN_GPU_FRACTION}")
        return v

    @field_validator("command", "args", mode="before")
    @classmethod
    def _argv(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError("must be a list of arguments, not a shell string")
        return v

    @field_validator("command", "args")
    @classmethod
    def _no_nul(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if info.context == STORED:
            return v
        for i, arg in enumerate(v):
            if "\x00" in arg:
                raise ValueError(f"argument {i} contains a NUL byte, which no process can take")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if info.context == STORED:
            return v
        for name, value in v.items():
            if not ENV_NAME.match(name) or len(name) > MAX_ENV_NAME:
                raise ValueError(
                    f"{name!r} is not a valid environment variable name (letters, digits, "
                    "'_', '-' and '.', not starting with a digit; no '=' or NUL)"
                )
            if "\x00" in value:
                raise ValueError(f"the value of {name} contains a NUL byte")
        return v

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str | float) -> str | float:
        if parse_cpu_milli(v) <= 0:
            raise ValueError("must be positive")
        if parse_cpu_milli(v) > MAX_CPU_MILLI:
            raise ValueError(f"must be at most {MAX_CPU_MILLI // 1000} CPUs")
        return v

    @field_validator("memory", "gpu_memory")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        if v is not None and parse_memory_mib(v) <= 0:
            raise ValueError("must be positive")
        if v is not None and parse_memory_mib(v) > MAX_MEMORY_MIB:
            raise ValueError("must be at most 1Pi")
        return v

    @model_validator(mode="after")
    def _one_gpu_request(self) -> JobSpec:
        if self.gpu is not None and self.gpu_memory is not None:
            raise ValueError("give either gpu or gpuMemory, not both")
        return self

    @property
    def cpu_milli(self) -> int:
        return parse_cpu_milli(self.cpu)

    @property
    def memory_mib(self) -> int:
        return parse_memory_mib(self.memory)

    @property
    def gpu_memory_mib(self) -> int | None:
        return None if self.gpu_memory is None else parse_memory_mib(self.gpu_memory)

    @property
    def gpus_distinct(self) -> bool:
        """`distinctGpus` as given, or the framework's default."""
        return self.framework.speaks_nccl if self.distinct_gpus is None else self.distinct_gpus


def spec_json(spec: JobSpec) -> dict[str, Any]:
    """The JSON form of a spec (camelCase, as the REST API and CRDs write it): what the
    store keeps and what the CR controller compares an edited TrainingJob against."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


TRAININGJOB = "TrainingJob"


@dataclass(frozen=True, slots=True)
class Origin:
    """The Kubernetes object a job was submitted as (a TrainingJob CR), kept in the
    store's own columns so that no module parses it out of a submitter or key string.

    `uid` is empty for a CR read without one; the worker pods get an owner reference
    to it only when it has a uid and lives in their namespace (owner references cannot
    cross namespaces)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
