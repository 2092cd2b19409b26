"""User-facing specs of queues and jobs (pydantic v2): the one validation shared by the
REST API, the TrainingJob/Queue CRD controller and the CLI.

Field names are the camelCase of the REST API and the CRDs; Python attributes are
snake_case. Checks that need the store or the cluster (unknown queue, a request no node
could hold) live in `scheduler.feasibility`, which takes these specs plus that context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from scheduler.spec import elastic, nodes
from scheduler.spec import volumes as vols
from scheduler.spec.common import DNS1123_SUBDOMAIN, Name, Priority, dns1123
from scheduler.spec.common import SpecModel as _Spec
from scheduler.spec.elastic import WorkerRange, Workers
from scheduler.spec.quantities import (
    MAX_CPU_MILLI,
    MAX_MEMORY_MIB,
    parse_cpu_milli,
    parse_memory_mib,
)

__all__ = [
    "ENV_NAME",
    "MAX_ENV_NAME",
    "MAX_RUNTIME_S",
    "MIN_GPU_FRACTION",
    "STORED",
    "TRAININGJOB",
    "Enforcement",
    "Framework",
    "JobSpec",
    "Origin",
    "Phase",
    "spec_json",
]

# What Kubernetes accepts as an environment variable name (and a process can be given).
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
MAX_ENV_NAME = 253
# `JobSpec.model_validate(data, context=STORED)`: a spec read back from the store, checked
# when it was submitted. Checks added since (env names, NUL bytes) do not make an old job
# unreadable: its launch fails instead, as that job's failure with the reason.
STORED = {"stored": True}
MAX_RUNTIME_S = 366 * 24 * 3600  # a year: larger runtimes overflow deadline arithmetic
MIN_GPU_FRACTION = 0.01  # finer shares are noise (and overflow capacity sums)


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


class JobSpec(_Spec):
    name: Name
    queue: Name
    # Where its pods, Service and claims live (Kubernetes); null: Shoal's jobs namespace.
    # A TrainingJob's is its own metadata.namespace.
    namespace: Name | None = Field(
        default=None,
        description="the Kubernetes namespace its worker pods, Service and claims are made "
        "in (its ResourceQuota, LimitRanges and Pod Security apply); unset: Shoal's jobs "
        "namespace. The queue's allowed.namespaces bound it",
    )
    framework: Framework = Framework.PYTORCH
    image: str = Field(min_length=1)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | vols.EnvFrom] = Field(
        default_factory=dict,
        description="NAME: value, or NAME: {valueFrom: {secretKeyRef | configMapKeyRef: "
        "{name, key}}} (read when the worker starts; Kubernetes only)",
    )
    workers: Workers = Field(
        default=1,
        description="how many workers; {min, max}: an elastic PyTorch job (torchrun "
        "--nnodes=min:max) that Shoal sizes between the two",
    )
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

    volumes: list[vols.Volume] | None = Field(
        default=None,
        max_length=vols.MAX_VOLUMES,
        description="pod volumes (persistentVolumeClaim, configMap, secret, emptyDir, "
        "csi, hostPath), as a pod's; mounted by volumeMounts",
    )
    volume_mounts: list[vols.VolumeMount] | None = Field(
        default=None,
        max_length=vols.MAX_VOLUMES,
        description="where the worker container mounts volumes, as a container's",
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        json_schema_extra={"pattern": DNS1123_SUBDOMAIN.pattern},
        description="the ServiceAccount the worker pods run as (its token is mounted); "
        "unset: the chart's worker account, else none mounted",
    )
    image_pull_secrets: list[vols.LocalObjectReference] | None = Field(
        default=None, description="Secrets to pull the image with, as a pod's"
    )
    resources: dict[str, int | str] | None = Field(
        default=None,
        description="more resources each worker requests and is limited to: extended "
        "resources (example.com/rdma: 1), ephemeral-storage, hugepages-<size>",
    )

    @field_validator("priority_class_name")
    @classmethod
    def _priority_class(cls, v: str | None) -> str | None:
        if v is not None and not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(
                "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')"
            )
        return v

    @field_validator("service_account_name")
    @classmethod
    def _service_account(cls, v: str | None) -> str | None:
        return v if v is None else vols.object_name(v)

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, int | str] | None) -> dict[str, int | str] | None:
        return v if v is None else {name: vols.resource(name, value) for name, value in v.items()}

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[vols.Volume] | None) -> list[vols.Volume] | None:
        vols.unique_names(v or [])
        return v

    @field_validator("volume_mounts")
    @classmethod
    def _mounts(
        cls, v: list[vols.VolumeMount] | None, info: ValidationInfo
    ) -> list[vols.VolumeMount] | None:
        # `volumes` is checked first (declared first); absent from `data` when it failed.
        if "volumes" in info.data:
            vols.check_mounts(info.data["volumes"] or [], v or [])
        return v

    @field_validator("workers", mode="wrap")
    @classmethod
    def _workers(cls, v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(v)
        except ValidationError as e:
            raise elastic.one_error(e) from None

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return nodes.node_selector(v)

    @field_validator("name", "queue")
    @classmethod
    def _names(cls, v: str) -> str:
        return dns1123(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        return v if v is None else dns1123(v)

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
    def _env(
        cls, v: dict[str, str | vols.EnvFrom], info: ValidationInfo
    ) -> dict[str, str | vols.EnvFrom]:
        if info.context == STORED:
            return v
        for name, value in v.items():
            if not ENV_NAME.match(name) or len(name) > MAX_ENV_NAME:
                raise ValueError(
                    f"{name!r} is not a valid environment variable name (letters, digits, "
                    "'_', '-' and '.', not starting with a digit; no '=' or NUL)"
                )
            if isinstance(value, str) and "\x00" in value:
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
        if isinstance(self.workers, WorkerRange) and self.framework is not Framework.PYTORCH:
            raise ValueError("workers: a {min, max} range is for pytorch jobs (torchrun elastic)")
        return self

    @property
    def min_workers(self) -> int:
        """The gang: all of a rigid job's workers, an elastic job's `min`."""
        return self.workers.min if isinstance(self.workers, WorkerRange) else self.workers

    @property
    def max_workers(self) -> int:
        return self.workers.max if isinstance(self.workers, WorkerRange) else self.workers

    @property
    def elastic(self) -> bool:
        return self.max_workers > self.min_workers

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
    def plain_env(self) -> dict[str, str]:
        """The `env` values given as strings (what every backend can set)."""
        return {k: v for k, v in self.env.items() if isinstance(v, str)}

    @property
    def env_from(self) -> dict[str, vols.EnvVarSource]:
        """The `env` values read from a Secret or ConfigMap (Kubernetes only)."""
        return {k: v.value_from for k, v in self.env.items() if not isinstance(v, str)}

    @property
    def claims(self) -> tuple[str, ...]:
        """The PersistentVolumeClaims its workers mount."""
        return tuple(
            v.persistent_volume_claim.claim_name
            for v in self.volumes or ()
            if v.persistent_volume_claim is not None
        )

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
