"""A job spec as the core's `JobRequest`: the one conversion, for a stored job (the
store adds its row's id, priority and time) and for one not stored yet (the front doors'
admission asks the core's own rules what it could ever get)."""

from __future__ import annotations

from scheduler import model
from scheduler.placement import eligible
from scheduler.spec import Enforcement, JobSpec


def job_request(
    spec: JobSpec,
    *,
    job_id: str = "",
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    submitted_at: float = 0.0,
) -> model.JobRequest:
    """`name` and `queue`: a stored job's own (else the spec's)."""
    return model.JobRequest(
        id=job_id,
        queue=spec.queue if queue is None else queue,
        workers=spec.min_workers,
        gpu=spec.gpu or 0.0,
        gpu_memory_mib=spec.gpu_memory_mib,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        gpu_types=tuple(spec.gpu_type),
        priority=priority,
        preemptible=spec.preemptible,
        submitted_at=submitted_at,
        max_runtime_s=None if spec.max_runtime is None else float(spec.max_runtime),
        grace_period_s=float(spec.termination_grace_period_seconds),
        name=spec.name if name is None else name,
        distinct_gpus=spec.gpus_distinct,
        enforced_only=spec.enforcement is Enforcement.REQUIRED,
        nodes=node_rules(spec),
        max_workers=spec.max_workers if spec.elastic else 0,
    )


def node_rules(spec: JobSpec) -> model.NodeRules | None:
    """The spec's nodeSelector, affinity and tolerations for placement (None: none)."""
    if spec.node_selector is None and spec.affinity is None and spec.tolerations is None:
        return None
    dump = spec.model_dump(mode="json", by_alias=True, include={"affinity", "tolerations"})
    return eligible.rules(spec.node_selector, dump.get("affinity"), dump.get("tolerations"))
