"""No starvation: reservations for long-waiting jobs, and Slurm-style backfill.

Called by `admission` (which tries starving jobs first). A job pending longer than
`Config.starvation_s` that does not fit now gets a reservation: the placement it would
get once enough running jobs end, releasing them in order of their estimated end
(`started_at + max_runtime_s`; jobs without one last, in start order). The room of
that placement is then held in the cluster state for the rest of the cycle, so
lower-ordered jobs cannot take it. A lower-ordered job may still use held room when
its own `max_runtime_s` ends before the reservation's estimated start (backfill);
without an estimate (some needed job declares no max runtime) the room is simply held.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from scheduler import model as m
from scheduler import placement
from scheduler.core import session, workingset

# Reservations are costly (a search over running jobs); like Slurm's bf_max_job_test,
# only the first few starving jobs in order get one per cycle.
MAX_RESERVATIONS = 8


@dataclass(frozen=True, slots=True)
class Reservation:
    job: m.JobRequest
    placements: tuple[m.WorkerPlacement, ...]
    start: float | None  # estimated time the room is free; None: unknown

    @property
    def job_id(self) -> str:
        return self.job.id

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.placements}))


def starving(job: m.JobRequest, snapshot: m.Snapshot) -> bool:
    return snapshot.now - job.submitted_at >= snapshot.config.starvation_s


def _end(run: m.RunningJob) -> float | None:
    if run.job.max_runtime_s is None:
        return None
    return run.started_at + run.job.max_runtime_s


def _fits_after(
    ctx: workingset.WorkingSet, job: m.JobRequest, ending: list[m.RunningJob]
) -> object:
    for run in ending:
        ctx.state.release(run.key)
    return placement.place_gang(ctx.state, job, ctx.snapshot.config.policy, explain=False)


def reserve(ctx: workingset.WorkingSet, job: m.JobRequest) -> Reservation | None:
    """Where and when `job` would fit as running jobs end; None when it never would.
    Leaves the cluster state as it found it."""
    allowed = set(ctx.est.allowed_models(job)) if job.gpu > 0 or job.gpu_memory_mib else None
    candidates = [
        r
        for r in ctx.snapshot.running
        if allowed is None
        or any(
            (node := ctx.nodes.get(p.node)) is not None and node.gpu_model in allowed
            for p in r.placements
        )
    ]
    candidates.sort(key=lambda r: (_end(r) is None, _end(r) or 0.0, r.started_at, r.job.id))
    with ctx.session.trial() as mark:
        if not isinstance(_fits_after(ctx, job, candidates), tuple):
            return None
        # Binary search the shortest prefix of endings after which the job fits.
        lo, hi = 1, len(candidates)
        best: tuple[m.WorkerPlacement, ...] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            ctx.session.rollback(mark)
            result = _fits_after(ctx, job, candidates[:mid])
            if isinstance(result, tuple):
                best, hi = result, mid - 1
            else:
                lo = mid + 1
        assert best is not None  # the full prefix fits, so the search found one
        needed = candidates[:lo]
        ends = [_end(r) for r in needed]
        known = [e for e in ends if e is not None]
        start = max(known, default=ctx.snapshot.now) if len(known) == len(ends) else None
        return Reservation(job, best, start)


def hold(ctx: workingset.WorkingSet, res: Reservation) -> None:
    """Take, for the rest of the cycle, the part of the reservation's room that is
    free now: each planned GPU's share up to what is free on it, and the CPU and
    memory of its workers up to what is free on their nodes."""
    by_node: dict[str, list[m.WorkerPlacement]] = defaultdict(list)
    for p in res.placements:
        by_node[p.node].append(p)
    holds: list[list[session.HoldPart]] = []
    for node, workers in sorted(by_node.items()):
        free = list(ctx.state.gpu_free(node))
        parts: list[m.WorkerPlacement] = []
        for p in workers:
            for g in p.gpus:
                take = min(p.fraction, free[g])
                if take > m.EPS:
                    free[g] -= take
                    parts.append(m.WorkerPlacement(len(parts), node, (g,), take))
        cpu = min(ctx.state.free_cpu(node), res.job.cpu_milli * len(workers))
        mem = min(ctx.state.free_memory(node), res.job.memory_mib * len(workers))
        # The GPU part carries no CPU or memory; the host part carries them.
        host = (m.WorkerPlacement(len(parts), node, (), 1.0),)
        holds.append(
            [
                (placement.Hold(res.job.id, node, gpu=True), tuple(parts), 0, 0),
                (placement.Hold(res.job.id, node, gpu=False), host, max(0, cpu), max(0, mem)),
            ]
        )
    ctx.session.hold(res.job.id, holds)


def may_backfill(job: m.JobRequest, res: Reservation, now: float) -> bool:
    """A job may use held room if it surely ends before the reservation starts."""
    return (
        job.max_runtime_s is not None
        and res.start is not None
        and now + job.max_runtime_s <= res.start + m.EPS
    )
