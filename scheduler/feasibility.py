"""Validation that needs context: the queues that exist and the nodes the scheduler last
saw. `scheduler.spec` checks a spec on its own; this module checks it against the world.
Callers pass the nodes as if empty (`store.load_capacity`: allocatable capacity, cordoned
and NotReady nodes included), so "never" means no node could hold it, not "not now".

Callers: the REST API and the CRD controller, before they store anything. Admins' limits
on what a job may ask of Kubernetes (`scheduler.spec.allowed`) are checked here too, so
every front door refuses the same things in the same words. Each problem is
a `Problem(loc, msg)` naming the field; an empty list admits. With an empty inventory
(no scheduler has reported nodes yet) capacity and GPU-type checks are skipped: the job
waits with a pending reason instead of being refused on no evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.core import accounting, request
from scheduler.model import EPS, JobRequest, Node, Queue
from scheduler.placement import fit
from scheduler.placement.shares import Sig
from scheduler.spec import JobSpec, allowed
from scheduler.spec.queue import QueueSpec


@dataclass(frozen=True, slots=True)
class Problem:
    loc: tuple[str | int, ...]
    msg: str


def _fmt(x: float) -> str:
    return f"{x:g}"


def _total_gpus(job: JobRequest, nodes: Sequence[Node]) -> float:
    """GPUs the job counts against its queue's limit: the core's own count
    (`accounting.PendingGpus`: a `gpuMemory` worker is the share of the largest GPU of an
    allowed model that holds it), so the door refuses only what the core would never
    place. With no GPU node known it counts nothing: no evidence, no refusal."""
    return accounting.PendingGpus(nodes).total(job)


def check_job(
    spec: JobSpec,
    *,
    queues: Mapping[str, Queue],
    nodes: Sequence[Node],
    limits: Mapping[str, allowed.Allowances] | None = None,
    chart_limits: allowed.Allowances | None = None,
    jobs_namespace: str = "shoal-jobs",
) -> list[Problem]:
    """Problems that make `spec` unschedulable forever (not merely for now), and what it
    asks that its queue's `limits` (else the chart's) do not allow (`jobs_namespace`:
    where a job that names no namespace runs)."""
    problems = [
        Problem(r.loc, r.msg)
        for r in allowed.refusals(
            spec,
            queue=spec.queue,
            mine=(limits or {}).get(spec.queue),
            chart=chart_limits,
            default_namespace=jobs_namespace,
        )
    ]
    queue = queues.get(spec.queue)
    if queue is None:
        known = ", ".join(sorted(queues)) or "none"
        problems.append(
            Problem(("queue",), f"queue {spec.queue!r} does not exist (known: {known})")
        )
    job = request.job_request(spec)
    total = _total_gpus(job, nodes)
    if queue is not None and queue.limit.total is not None and total > queue.limit.total + EPS:
        problems.append(
            Problem(
                ("workers",),
                f"needs {_fmt(total)} GPUs in total but queue {queue.name!r} may hold at most "
                f"{_fmt(queue.limit.total)} (its limit)",
            )
        )
    if not nodes:
        return problems
    models = sorted({n.gpu_model for n in nodes if n.gpu_count > 0})
    unknown = [t for t in spec.gpu_type if t not in models]
    for i, t in enumerate(spec.gpu_type):
        if t in unknown:
            problems.append(
                Problem(("gpuType", i), f"no node has GPU type {t!r} (known: {', '.join(models)})")
            )
    if unknown and len(unknown) == len(spec.gpu_type):
        return problems
    eligible = [n for n in nodes if not spec.gpu_type or n.gpu_model in spec.gpu_type]
    problems.extend(_capacity(spec, job, eligible))
    return problems


def _capacity(spec: JobSpec, job: JobRequest, nodes: Sequence[Node]) -> list[Problem]:
    wants_gpu = spec.gpu is not None or spec.gpu_memory_mib is not None
    gpu_nodes = [n for n in nodes if n.gpu_count > 0] if wants_gpu else list(nodes)
    if not gpu_nodes:
        return [Problem(("gpu",), "no node with GPUs of the requested type exists")]
    if spec.gpu is not None and spec.gpu > 1:
        largest = max(n.gpu_count for n in gpu_nodes)
        if spec.gpu > largest:
            return [
                Problem(
                    ("gpu",),
                    f"needs {_fmt(spec.gpu)} GPUs on one node per worker; the largest node "
                    f"has {largest}",
                )
            ]
    if spec.gpu_memory_mib is not None:
        largest_mem = max(n.gpu_memory_mib for n in gpu_nodes)
        if spec.gpu_memory_mib > largest_mem:
            return [
                Problem(
                    ("gpuMemory",),
                    f"needs {spec.gpu_memory_mib} MiB of GPU memory per worker; the largest "
                    f"GPU has {largest_mem} MiB",
                )
            ]
    if max(n.cpu_milli for n in gpu_nodes) < spec.cpu_milli:
        return [Problem(("cpu",), f"needs {spec.cpu_milli}m CPU per worker; no node has that")]
    if max(n.memory_mib for n in gpu_nodes) < spec.memory_mib:
        return [Problem(("memory",), f"needs {spec.memory_mib} MiB per worker; no node has that")]
    # The core's own fit (`placement.fit.capacity`) on each node as an admin could make
    # it: fractions enforced and no MPS slices (MPS may be started or reconfigured later),
    # and the job's workers allowed to share a GPU. A gang short of distinct GPUs, or of
    # enforcing nodes, waits with its reason instead (docs/core.md: the door does not
    # refuse those).
    demand = fit.Demand.of(job)._replace(enforced_only=False)
    capacity = sum(
        fit.capacity(demand, Sig.empty(n)._replace(slices=0), job.workers) for n in gpu_nodes
    )
    if capacity < spec.min_workers:
        return [
            Problem(
                ("workers",),
                f"{spec.min_workers} workers can never run at once: the whole cluster "
                f"({len(gpu_nodes)} eligible nodes, empty) holds at most {capacity} of them",
            )
        ]
    return []


def check_queue(
    spec: QueueSpec, *, queues: Mapping[str, Queue], nodes: Sequence[Node] = ()
) -> list[Problem]:
    """Refuse what contradicts itself or the tree: a child's guarantee must fit in its
    parent's, beside its siblings' guarantees; a child's limit may not exceed its
    parent's (nor a parent's fall below a child's); a per-model amount may not exceed the
    queue's total, nor name a GPU model no node has (when nodes are known). Promises the
    cluster cannot keep today (guarantees above its GPUs) are `queue_warnings`, not
    refusals: the cluster may grow."""
    problems: list[Problem] = []
    mine = spec.guaranteed.total or 0.0
    if spec.limit is not None and spec.limit.total is not None and mine > spec.limit.total + EPS:
        problems.append(
            Problem(("limit", "total"), f"limit {_fmt(spec.limit.total)} is below the guarantee")
        )
    problems.extend(_per_model(spec, nodes))
    problems.extend(_limits_in_tree(spec, queues))
    if spec.parent is None:
        return problems
    if spec.parent == spec.name:
        return [*problems, Problem(("parent",), "a queue cannot be its own parent")]
    parent = queues.get(spec.parent)
    if parent is None:
        return [*problems, Problem(("parent",), f"parent queue {spec.parent!r} does not exist")]
    siblings = [q for q in queues.values() if q.parent == parent.name and q.name != spec.name]
    used = sum(q.guaranteed.total or 0.0 for q in siblings)
    cap = parent.guaranteed.total
    if cap is not None and cap > 0 and mine + used > cap + EPS:
        problems.append(
            Problem(
                ("guaranteed", "total"),
                f"{_fmt(mine)} GPUs do not fit in parent {parent.name!r}: it guarantees "
                f"{_fmt(cap)} and its other children already take {_fmt(used)}",
            )
        )
    return problems


def _per_model(spec: QueueSpec, nodes: Sequence[Node]) -> list[Problem]:
    problems: list[Problem] = []
    models = sorted({n.gpu_model for n in nodes if n.gpu_count > 0})
    limit_models = spec.limit.by_model if spec.limit is not None else {}
    for field, quota in (("guaranteed", spec.guaranteed.by_model), ("limit", limit_models)):
        for model in quota:
            if models and model not in models:
                problems.append(
                    Problem(
                        (field, model),
                        f"no node has GPU model {model!r} (known: {', '.join(models)})",
                    )
                )
    total = spec.guaranteed.total
    for model, amount in spec.guaranteed.by_model.items():
        if total is not None and amount > total + EPS:
            problems.append(
                Problem(
                    ("guaranteed", model),
                    f"{_fmt(amount)} {model} GPUs exceed the queue's whole guarantee {_fmt(total)}",
                )
            )
        cap = limit_models.get(model)
        if cap is not None and amount > cap + EPS:
            problems.append(
                Problem(("limit", model), f"limit {_fmt(cap)} is below the {model} guarantee")
            )
    return problems


def _limits_in_tree(spec: QueueSpec, queues: Mapping[str, Queue]) -> list[Problem]:
    """A child may hold no more than its parent: limits (total and per model) nest."""
    problems: list[Problem] = []
    mine = spec.limit
    parent = queues.get(spec.parent) if spec.parent is not None else None
    if parent is not None:
        cap = parent.limit.total
        if cap is not None:
            if mine is None or mine.total is None:
                pass  # no limit of its own: the parent's caps it
            elif mine.total > cap + EPS:
                problems.append(
                    Problem(
                        ("limit", "total"),
                        f"limit {_fmt(mine.total)} is above parent {parent.name!r}'s limit "
                        f"{_fmt(cap)}",
                    )
                )
            if (spec.guaranteed.total or 0.0) > cap + EPS:
                problems.append(
                    Problem(
                        ("guaranteed", "total"),
                        f"guarantee {_fmt(spec.guaranteed.total or 0.0)} is above parent "
                        f"{parent.name!r}'s limit {_fmt(cap)}",
                    )
                )
        for model, amount in (mine.by_model if mine is not None else {}).items():
            pcap = parent.limit.by_model.get(model)
            if pcap is not None and amount > pcap + EPS:
                problems.append(
                    Problem(
                        ("limit", model),
                        f"{model} limit {_fmt(amount)} is above parent {parent.name!r}'s "
                        f"{_fmt(pcap)}",
                    )
                )
    new_cap = mine.total if mine is not None else None
    if new_cap is not None:  # an update must not cut below what its children may hold
        for child in queues.values():
            if child.parent != spec.name:
                continue
            held = child.limit.total
            if held is not None and held > new_cap + EPS:
                problems.append(
                    Problem(
                        ("limit", "total"),
                        f"limit {_fmt(new_cap)} is below child {child.name!r}'s limit {_fmt(held)}",
                    )
                )
    return problems


def queue_warnings(
    spec: QueueSpec, *, queues: Mapping[str, Queue], nodes: Sequence[Node]
) -> list[str]:
    """What an admin should hear about an admitted queue: guarantees the cluster cannot
    keep today (the queue's own, or all top-level guarantees together, above the GPUs the
    scheduler last saw)."""
    if not nodes:
        return []
    out: list[str] = []
    gpus = sum(n.gpu_count for n in nodes)
    by_model: dict[str, int] = {}
    for n in nodes:
        by_model[n.gpu_model] = by_model.get(n.gpu_model, 0) + n.gpu_count
    mine = spec.guaranteed.total or 0.0
    if mine > gpus + EPS:
        out.append(
            f"guaranteed.total: {_fmt(mine)} GPUs guaranteed but the cluster has {gpus}; "
            "the promise cannot be kept until the cluster grows"
        )
    for model, amount in spec.guaranteed.by_model.items():
        have = by_model.get(model, 0)
        if have and amount > have + EPS:
            out.append(f"guaranteed.{model}: {_fmt(amount)} guaranteed but the cluster has {have}")
    if spec.parent is None:
        others = sum(
            q.guaranteed.total or 0.0
            for q in queues.values()
            if q.parent is None and q.name != spec.name
        )
        if mine <= gpus + EPS < mine + others:
            out.append(
                f"guaranteed.total: top-level queues now guarantee {_fmt(mine + others)} GPUs "
                f"in all, more than the cluster's {gpus} (over-committed)"
            )
    return out
