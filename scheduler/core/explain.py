"""The full account of one job's fate in a cycle (`GET /api/v1/jobs/{id}/explain`).

Called by the API and the CLI with the same snapshot the loop schedules. Runs the cycle
(`cycle.run`), then reports the fair-share arithmetic of the job's queue and its
ancestors, its place in the cycle's order and in its queue, its decision (placed,
preempting, pending with a reason) and the best candidate nodes with why each fails
(`placement.diagnose`, only here: too costly for every job of a cycle); for a job the
cycle places, the candidates are the policy's best nodes with the numbers behind its
choice (`placement.explain_choice`, on the state after the cycle with the job's own
placement taken back). Both judge room only: a candidate node the job's node rules (or
a taint it does not tolerate) refuse is shown as not fitting, with kube-scheduler's
words for why. The result is
plain data: `dataclasses.asdict(explain(...))` is JSON-serialisable.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from scheduler import model as m
from scheduler import placement
from scheduler.core import cycle, fairshare
from scheduler.placement import eligible


@dataclass(frozen=True, slots=True)
class ShareLine:
    """One queue's fair-share arithmetic for one key (all GPUs, or one model)."""

    queue: str
    resource: str
    guaranteed: float
    limit: float | None
    weight: float
    usage: float
    demand: float
    entitled: float
    pool: float
    share: float


@dataclass(frozen=True, slots=True)
class Candidate:
    node: str
    fits: bool  # the whole job fits on this node now
    reason: str
    workers: int = 0  # how many of its workers fit there now (0 < workers < all: part)


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    queue: str
    decision: str  # "placed" | "preempting" | "pending" | "running" | "unknown"
    position: int | None  # 1-based place in the cycle's order of pending jobs
    queue_position: int | None  # 1-based place among its queue's pending jobs
    fair_share: list[ShareLine] = field(default_factory=list)  # its queue, then ancestors
    reason: dict[str, object] | None = None
    placements: list[dict[str, object]] = field(default_factory=list)
    preempts: list[dict[str, object]] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)


def _lines(name: str, share: fairshare.QueueShare) -> list[ShareLine]:
    keyed = [(m.TOTAL, share.total), *sorted(share.by_model.items())]
    return [
        ShareLine(
            name,
            key,
            s.guaranteed,
            s.limit,
            s.weight,
            s.usage,
            s.demand,
            s.entitled,
            s.pool,
            s.share,
        )
        for key, s in keyed
    ]


def explain(snapshot: m.Snapshot, job_id: str) -> Explanation:
    """How `job_id` (pending or running) fares in the cycle on `snapshot`."""
    done = cycle.run(snapshot)
    ctx, result = done.ctx, done.result
    job = next((j for j in snapshot.pending if j.id == job_id), None)
    if job is None:
        running = ctx.running.get(job_id)
        if running is None:
            return Explanation(job_id, "", "unknown", None, None)
        job = running.job
    shares = [
        line
        for name in ctx.tree.chains.get(job.queue, ())
        for line in _lines(name, ctx.shares[name])
    ]
    if job_id in ctx.running:
        placed = [dataclasses.asdict(p) for p in ctx.running[job_id].placements]
        return Explanation(job_id, job.queue, "running", None, None, shares, placements=placed)
    ids = [j.id for j in done.ordered]
    mine = [j.id for j in done.ordered if j.queue == job.queue]
    position = ids.index(job_id) + 1 if job_id in ids else None
    queue_position = mine.index(job_id) + 1 if job_id in mine else None
    place = next((p for p in result.places if p.job_id == job_id), None)
    keep = next((k for k in result.pending if k.job_id == job_id), None)
    preempts = [dataclasses.asdict(p) for p in result.preempts if p.for_job == job_id]
    preempts += [  # elastic jobs it would shrink: as a preemption of some of their workers
        {"job_id": r.job_id, "reason": r.reason, "grace_period_s": r.grace_period_s,
         "for_job": r.for_job}
        for r in result.resizes
        if r.for_job == job_id
    ]  # fmt: skip
    decision = "placed" if place else ("preempting" if preempts else "pending")
    reason: dict[str, object] | None = None
    if keep is not None:
        reason = {
            "code": str(keep.reason.code),
            "message": keep.reason.message,
            "details": dict(keep.reason.details),
        }
    candidates: list[Candidate] = []
    if place is not None and ctx.state.holds(job_id):
        with ctx.session.trial():
            ctx.state.release(job_id)
            candidates = [
                Candidate(f.node, f.fits, f.reason, f.workers)
                for f in placement.explain_choice(ctx.state, job, snapshot.config.policy)
            ]
    elif place is None and job.queue in ctx.tree.queues:
        # Nodes as admission left them, before preemption plans changed the state.
        ctx.session.rollback(done.after_admission)
        candidates = [
            Candidate(f.node, f.fits, f.reason, f.workers)
            for f in placement.diagnose(ctx.state, job)
        ]
    return Explanation(
        job_id,
        job.queue,
        decision,
        position,
        queue_position,
        shares,
        reason,
        [dataclasses.asdict(p) for p in place.placements] if place else [],
        preempts,
        [_allowed(c, job, ctx.nodes.get(c.node)) for c in candidates],
    )


def _allowed(c: Candidate, job: m.JobRequest, node: m.Node | None) -> Candidate:
    """The candidate, or, where the job's node rules refuse its node, that refusal."""
    why = eligible.refusal(job.nodes, node) if node is not None else None
    return c if why is None else Candidate(c.node, False, f"node rules: {why}")
