"""Validation that needs context: the queues that exist and the nodes the scheduler last
saw. `scheduler.spec` checks a spec on its own; this module checks it against the world.

Callers: the REST API and the CRD controller, before they store anything. Each problem is
a `Problem(loc, msg)` naming the field; an empty list admits. With an empty inventory
(no scheduler has reported nodes yet) capacity and GPU-type checks are skipped: the job
waits with a pending reason instead of being refused on no evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.model import EPS, Node, Queue
from scheduler.spec import JobSpec, QueueSpec


@dataclass(frozen=True, slots=True)
class Problem:
    loc: tuple[str | int, ...]
    msg: str


def _fmt(x: float) -> str:
    return f"{x:g}"


def _workers_per_node(spec: JobSpec, node: Node) -> int:
    """How many of the job's workers an empty `node` could hold."""
    by_cpu = node.cpu_milli // max(spec.cpu_milli, 1)
    by_mem = node.memory_mib // max(spec.memory_mib, 1)
    fits = min(by_cpu, by_mem)
    if spec.gpu_memory_mib is not None:
        if node.gpu_count == 0 or spec.gpu_memory_mib > node.gpu_memory_mib:
            return 0
        share = spec.gpu_memory_mib / node.gpu_memory_mib
        fits = min(fits, node.gpu_count * math.floor(1 / share + EPS))
    elif spec.gpu is not None:
        if spec.gpu <= 1:
            fits = min(fits, node.gpu_count * math.floor(1 / spec.gpu + EPS))
        else:
            fits = min(fits, node.gpu_count // int(spec.gpu))
    return max(fits, 0)


def check_job(
    spec: JobSpec, *, queues: Mapping[str, Queue], nodes: Sequence[Node]
) -> list[Problem]:
    """Problems that make `spec` unschedulable forever (not merely for now)."""
    problems: list[Problem] = []
    queue = queues.get(spec.queue)
    if queue is None:
        known = ", ".join(sorted(queues)) or "none"
        problems.append(
            Problem(("queue",), f"queue {spec.queue!r} does not exist (known: {known})")
        )
    gpus_per_worker = spec.gpu or (1.0 if spec.gpu_memory_mib is not None else 0.0)
    total = gpus_per_worker * spec.workers
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
    problems.extend(_capacity(spec, eligible))
    return problems


def _capacity(spec: JobSpec, nodes: Sequence[Node]) -> list[Problem]:
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
    capacity = sum(_workers_per_node(spec, n) for n in gpu_nodes)
    if capacity < spec.workers:
        return [
            Problem(
                ("workers",),
                f"{spec.workers} workers can never run at once: the whole cluster "
                f"({len(gpu_nodes)} eligible nodes, empty) holds at most {capacity} of them",
            )
        ]
    return []


def check_queue(spec: QueueSpec, *, queues: Mapping[str, Queue]) -> list[Problem]:
    """A child's guarantee must fit in its parent's, beside its siblings' guarantees."""
    problems: list[Problem] = []
    mine = spec.guaranteed.total or 0.0
    if spec.limit is not None and spec.limit.total is not None and mine > spec.limit.total + EPS:
        problems.append(
            Problem(("limit", "total"), f"limit {_fmt(spec.limit.total)} is below the guarantee")
        )
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
