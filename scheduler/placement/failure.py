"""Why a gang does not fit, in words a person can act on, with the numbers.

Called by `gang.place_gang` when no placement exists; the answer is the job's
`PendingReason` as the core reports it (one type for both). The checks run from the most
basic to the most specific, and the first that explains the failure is the reason:
GPU type, a worker larger than any node, not enough free GPUs at all (NoFittingNode),
enough free GPU share in total but no single GPU or node holding one worker's part
(Fragmentation), CPU or memory, a gang that fits only with two of its workers on one
GPU where its workers need distinct GPUs (DistinctGpus), and last a gang larger than
the room left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler import model as m
from scheduler.placement import fit
from scheduler.placement.state import UNIT, ClusterState, Sig, view

R = m.ReasonCode


def opaque(job: m.JobRequest) -> m.PendingReason:
    return m.PendingReason(R.NO_NODE, f"job {job.id} does not fit now", {})


def _gib(mib: int) -> str:
    return f"{mib / 1024:g} GiB"


def _ask(job: m.JobRequest) -> str:
    if job.gpu_memory_mib:
        return f"{job.gpu_memory_mib} MiB of one GPU"
    if 0 < job.gpu < 1:
        return f"{job.gpu:g} of one GPU"
    return f"{job.gpu:g} GPUs on one node" if job.gpu > 1 else "1 GPU"


_Allowed = list[tuple[Sig, fit.Need, int]]  # node class, the worker's need there, node count


def explain(
    state: ClusterState, job: m.JobRequest, only: frozenset[int] | None = None
) -> m.PendingReason:
    """Why the job does not fit on the nodes in `only` (the nodes its node rules allow;
    None: every node); the message says how many nodes that is when it is not all."""
    if only is None or len(only) == len(state.nodes):
        return _withheld(state, job, None, _explain(state, job, None))
    why = _explain(state, job, only)
    where = f"on the {len(only)} of {len(state.nodes)} nodes its node rules allow: "
    why = replace(why, message=where + why.message, details={**why.details, "nodes": len(only)})
    return _withheld(state, job, only, why)


def _withheld(
    state: ClusterState, job: m.JobRequest, only: frozenset[int] | None, why: m.PendingReason
) -> m.PendingReason:
    """GPUs a node has but does not offer (`Node.withheld`: another scheduler allocates
    them) are part of why a GPU job waits: the reason names such a node and why."""
    if not (job.gpu > 0 or job.gpu_memory_mib):
        return why
    off = [n for i, n in enumerate(state.nodes) if n.withheld and (only is None or i in only)]
    if not off:
        return why
    more = f" (and {len(off) - 1} more such node(s))" if len(off) > 1 else ""
    return replace(
        why,
        message=f"{why.message}; {off[0].withheld}{more}",
        details={**why.details, "withheld": {n.name: n.withheld for n in off}},
    )


def _explain(
    state: ClusterState, job: m.JobRequest, only: frozenset[int] | None
) -> m.PendingReason:
    d = fit.Demand.of(job)
    workers = max(job.workers, 1)
    classes = view(state.classes, only)
    nodes = [(i, n) for i, n in enumerate(state.nodes) if only is None or i in only]
    sigs = [
        (s, fit.need(d, s.model, s.gpu_mem, s.slices, s.no_sharing), len(ms))
        for s, ms in classes.items()
    ]
    allowed = [(s, n, k) for s, n, k in sigs if n is not None]
    base = {
        "workers": workers,
        "gpu": job.gpu,
        "cpu_milli": d.cpu_milli,
        "memory_mib": d.memory_mib,
    }
    enforcing = [(s, n, k) for s, n, k in allowed if not fit.unenforced(d, n, s)]
    if allowed and not enforcing:
        return _not_enforced(job, base)
    allowed = enforcing
    if not allowed:
        return _runs_nowhere([n for _, n in nodes], job, d, base)
    gpu_ok = [(s, n, k) for s, n, k in allowed if fit.gpu_fits(n, s.shares)]
    free_total = sum(sum(s.shares) * k for s, _, k in allowed) / UNIT
    if not gpu_ok:
        return _no_gpus(job, allowed, free_total, base)
    full = [s for s, _, _ in gpu_ok if s.cpu >= d.cpu_milli and s.mem >= d.memory_mib]
    if not full:
        return _no_cpu_or_memory(job, d, [s for s, _, _ in gpu_ok], base)
    caps = [(fit.capacity(d, s, workers, distinct=job.distinct_gpus), k) for s, _, k in allowed]
    room = sum(c * k for c, k in caps)
    if job.distinct_gpus and room < workers:
        shared = sum(fit.capacity(d, s, workers) * k for s, _, k in allowed)
        if shared >= workers:
            return _distinct(state, nodes, job, d, room, base)
    largest = max(c for c, _ in caps)
    per = max(n.gpus * n.share for _, n, _ in allowed) / UNIT
    code = R.FRAGMENTATION if per and free_total >= per * workers else R.NO_NODE
    return m.PendingReason(
        code,
        f"needs {workers} workers at once, each {_ask(job)}; only {room} fit now "
        f"across all nodes (the largest node holds {largest})",
        {
            **base,
            "fit_workers": room,
            "largest_node_workers": largest,
            "free_gpus_total": free_total,
        },
    )


def _not_enforced(job: m.JobRequest, base: Mapping[str, object]) -> m.PendingReason:
    return m.PendingReason(
        R.NO_NODE,
        f"asks for {_ask(job)} enforced (enforcement: required); no node of an allowed "
        "type enforces GPU fractions (they are advisory where MPS does not run)",
        {**base, "enforcement": "required"},
    )


def _no_cpu_or_memory(
    job: m.JobRequest, d: fit.Demand, gpu_ok: list[Sig], base: Mapping[str, object]
) -> m.PendingReason:
    """Its GPUs fit somewhere, but no such node has the CPU and memory of a worker."""
    cpu = max(s.cpu for s in gpu_ok)
    mem = max(s.mem for s in gpu_ok)
    where = "on a node where its GPUs fit" if job.gpu or job.gpu_memory_mib else ""
    return m.PendingReason(
        R.NO_NODE,
        f"needs {d.cpu_milli}m CPU and {_gib(d.memory_mib)} memory per worker {where}; "
        f"the most free such node has {cpu}m CPU and {_gib(mem)} memory".replace("  ", " "),
        {**base, "most_free_cpu_milli": cpu, "most_free_memory_mib": mem},
    )


def _distinct(
    state: ClusterState,
    nodes: list[tuple[int, m.Node]],
    job: m.JobRequest,
    d: fit.Demand,
    room: int,
    base: Mapping[str, object],
) -> m.PendingReason:
    """The gang fits only with two of its workers on one GPU, which NCCL refuses."""
    workers = max(job.workers, 1)
    where = ""
    for i, node in nodes:
        n = fit.need(d, node.gpu_model, node.gpu_memory_mib, node.slices, bool(node.no_sharing))
        if n is None or n.gpus != 1 or not n.share:
            continue
        most = max(((v // n.share, g) for g, v in enumerate(state.gpu[i])), default=(0, 0))
        if most[0] >= 2:
            where = f": {most[0]} free fractions on {node.name} gpu{most[1]} count once"
            break
    return m.PendingReason(
        R.DISTINCT_GPUS,
        f"workers of one job need distinct GPUs (NCCL puts one rank on a GPU; set "
        f"distinctGpus: false for gloo){where}; {room} of {workers} workers of "
        f"{_ask(job)} fit now",
        {**base, "fit_workers": room, "distinct_gpus": True},
    )


def _runs_nowhere(
    nodes: list[m.Node], job: m.JobRequest, d: fit.Demand, base: Mapping[str, object]
) -> m.PendingReason:
    """No node class can ever hold one worker: its GPU type, its GPU memory, or GPUs
    shared as MPS replicas smaller than the worker."""
    wants_gpu = job.gpu > 0 or bool(job.gpu_memory_mib)
    if not any(n.gpu_count or not wants_gpu for n in nodes):
        # Nothing to compare the job with (the numbers below would be None and 0).
        what = "node with GPUs" if wants_gpu else "node"
        return m.PendingReason(
            R.NO_NODE,
            f"needs {_ask(job)}; no {what} is offered now: none has joined, or all are "
            "cordoned or NotReady",
            {**base, "nodes_offered": len(nodes)},
        )
    models = sorted({n.gpu_model for n in nodes if n.gpu_count})
    if d.gpu_types and not set(d.gpu_types) & set(models):
        return m.PendingReason(
            R.GPU_TYPE,
            f"needs GPU type {' or '.join(d.gpu_types)}; the cluster has "
            f"{', '.join(models) or 'no GPUs'}",
            {**base, "gpu_types": list(d.gpu_types), "cluster_models": models},
        )
    off = [
        n
        for n in nodes
        if n.gpu_count and n.no_sharing and (not d.gpu_types or n.gpu_model in d.gpu_types)
    ]
    if off and fit.fractional(d):
        # Sharing is off where the GPUs are (e.g. a reservation found no GPU): say why.
        return m.PendingReason(
            R.NO_NODE,
            f"needs {_ask(job)}; GPU sharing is off on every node that could hold it "
            f"(whole GPUs are still offered there): {off[0].name}: {off[0].no_sharing}",
            {**base, "no_sharing": {n.name: n.no_sharing for n in off}},
        )
    sliced = sorted({n.slices for n in nodes if n.gpu_count and n.slices})
    if sliced and all(n.slices for n in nodes if n.gpu_count):
        return m.PendingReason(
            R.NO_NODE,
            f"needs {_ask(job)}; every GPU node shares its GPUs as MPS replicas of "
            f"1/{max(sliced)} (a worker there takes one replica, nothing larger)",
            {**base, "slices": sliced},
        )
    largest = max((n.gpu_memory_mib for n in nodes), default=0)
    if job.gpu_memory_mib is None:
        return m.PendingReason(
            R.NO_NODE, f"needs {_ask(job)}; no node offered can ever hold one worker", base
        )
    return m.PendingReason(
        R.NO_NODE,
        f"needs {job.gpu_memory_mib} MiB of GPU memory per worker; the largest GPU "
        f"of an allowed type has {largest} MiB",
        {**base, "gpu_memory_mib": job.gpu_memory_mib, "largest_gpu_memory_mib": largest},
    )


def _no_gpus(
    job: m.JobRequest, allowed: _Allowed, free_total: float, base: Mapping[str, object]
) -> m.PendingReason:
    """No node has the free GPUs one worker needs now: too few, or in pieces."""
    whole = next((n.gpus for _, n, _ in allowed if n.gpus > 1), 0)
    if whole:
        block = max(sum(1 for v in s.shares if v >= UNIT) for s, _, _ in allowed)
        most = max(len(s.shares) for s, _, _ in allowed)
        if most < whole:
            return m.PendingReason(
                R.NO_NODE,
                f"needs {whole} GPUs on one node; the largest node of an allowed type has {most}",
                {**base, "largest_node_gpus": most, "largest_free_block": block},
            )
        code = R.FRAGMENTATION if free_total >= whole else R.NO_NODE
        tail = f" ({free_total:g} GPUs free in total, spread over nodes)"
        return m.PendingReason(
            code,
            f"needs {whole} GPUs on one node; the largest free block is {block}"
            + (tail if code is R.FRAGMENTATION else ""),
            {**base, "largest_free_block": block, "free_gpus_total": free_total},
        )
    most_free = max((s.shares[0] for s, _, _ in allowed if s.shares), default=0) / UNIT
    share = max(n.share for _, n, _ in allowed) / UNIT
    code = R.FRAGMENTATION if free_total >= share else R.NO_NODE
    pieces = f" ({free_total:g} GPUs free in total, in pieces)" if code is R.FRAGMENTATION else ""
    return m.PendingReason(
        code,
        f"needs {_ask(job)}; the most free GPU has {most_free:g} free{pieces}",
        {**base, "most_free_gpu": most_free, "free_gpus_total": free_total},
    )
