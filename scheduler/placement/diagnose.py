"""Per-node account of a job's fit, for `explain` (`GET /api/v1/jobs/{id}/explain`).

Called by the core's explain. Ranks nodes as candidates for one worker of the job:
nodes where workers fit first (those holding more of the gang ahead), then the near
misses (most free GPU first), each with a sentence saying why it fits or fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core import model as m
from scheduler.placement import fit
from scheduler.placement.state import UNIT, ClusterState, Sig


@dataclass(frozen=True, slots=True)
class NodeFit:
    node: str
    fits: bool
    reason: str


def _why(d: fit.Demand, s: Sig, workers: int) -> tuple[int, str, int]:
    """(distance, reason, workers that fit): 0 fits, 1 short of room, 2 never fits."""
    n = fit.need(d, s.model, s.gpu_mem)
    if n is None:
        if d.types and s.model not in d.types:
            return 2, f"GPU type {s.model or 'none'} is not one of {', '.join(d.types)}", 0
        return 2, f"its GPUs have {s.gpu_mem} MiB; the job asks {d.gpu_mem} MiB", 0
    if not fit.gpu_fits(n, s.shares):
        block = sum(1 for v in s.shares if v >= UNIT)
        if n.share >= UNIT:
            plural = "s" if n.gpus > 1 else ""
            return 1, f"needs {n.gpus} free GPU{plural}; {block} of {len(s.shares)} are free", 0
        top = s.shares[0] / UNIT if s.shares else 0.0
        return 1, f"needs {n.share / UNIT:g} of one GPU; the most free GPU has {top:g}", 0
    if d.cpu > s.cpu:
        return 1, f"needs {d.cpu}m CPU; {s.cpu}m free", 0
    if d.mem > s.mem:
        return 1, f"needs {d.mem} MiB memory; {s.mem} MiB free", 0
    k = fit.capacity(d, s, workers)
    if workers > 1:
        return 0, f"fits {k} of {workers} workers", k
    return 0, "fits", k


def diagnose(state: ClusterState, job: m.JobRequest, top: int = 5) -> list[NodeFit]:
    """The `top` best candidate nodes and why each fits or fails."""
    d = fit.Demand.of(job)
    workers = max(job.workers, 1)
    ranked = []
    for s, members in state.classes.items():
        far, reason, k = _why(d, s, workers)
        ranked.append(((far, -k, -sum(s.shares), -s.cpu, members[0]), members, far == 0, reason))
    ranked.sort(key=lambda r: r[0])
    out: list[NodeFit] = []
    for _, members, ok, reason in ranked:
        for i in members:
            if len(out) >= top:
                return out
            out.append(NodeFit(state.nodes[i].name, ok, reason))
    return out
