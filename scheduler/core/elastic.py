"""Elastic jobs in the cycle: the size one starts at, growing into idle GPUs, and
shrinking instead of being preempted.

An elastic job (`JobRequest.max_workers` > `workers`) is a gang of `workers` (its
`min`) plus up to `max_workers - workers` more. For the cycle, `split` makes each
running one its gang plus one entry per further worker (`RunningJob.split_from`), so that
preemption can take those workers one by one as victims of their own: first of all
(a shrink costs the job a restart from its last checkpoint; a preemption, all it did
since), newest first. `shrinks` turns the workers a plan took into a `Resize` that
keeps the job's first workers. After admission and preemption, `grow` hands idle GPUs
to elastic jobs below their max, when no job waits for room, at most once every
`Config.resize_interval_s` per job (every resize restarts its workers). Quota, fair
share and the NCCL rule hold at every size: a grow is placed like a gang, within the
queue's limits, on GPUs none of the job's workers holds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from scheduler import model as m
from scheduler import placement

if TYPE_CHECKING:  # the context splits the running jobs with `split`
    from scheduler.core import workingset

# Pending reasons that mean a job waits for room: while one does, idle GPUs stay idle
# rather than go to a job that already runs.
_WAITS_FOR_ROOM = frozenset(
    {
        m.ReasonCode.NO_NODE,
        m.ReasonCode.FRAGMENTATION,
        m.ReasonCode.DISTINCT_GPUS,
        m.ReasonCode.FAIR_SHARE,
        m.ReasonCode.RESERVED,
        m.ReasonCode.WAITING_FOR_PREEMPTION,
    }
)


def split(running: Iterable[m.RunningJob]) -> list[m.RunningJob]:
    """Each elastic job beyond its gang as its gang plus one entry per further worker."""
    out: list[m.RunningJob] = []
    for run in running:
        job = run.job
        if (
            not job.elastic
            or run.stopping
            or run.split_from >= 0
            or len(run.placements) <= job.workers
        ):
            out.append(run)
            continue
        ordered = sorted(run.placements, key=lambda p: p.worker)
        out.append(dataclasses.replace(run, placements=tuple(ordered[: job.workers])))
        out.extend(
            dataclasses.replace(run, placements=(p,), split_from=p.worker)
            for p in ordered[job.workers :]
        )
    return out


def start_size(ctx: workingset.WorkingSet, job: m.JobRequest) -> int:
    """The most workers (at least the gang) that keep its queue within its fair share."""
    if not job.elastic:
        return job.workers
    per = ctx.est.total(job) / job.workers
    share = ctx.shares.get(job.queue)
    if per <= m.EPS or share is None:
        return job.max_workers  # no GPUs: nothing to share, placement decides
    room = share.total.share - ctx.ledger.of(job.queue)
    return max(job.workers, min(job.max_workers, math.floor(room / per + m.EPS)))


def whole(
    chosen: Sequence[m.RunningJob], running: Sequence[m.RunningJob], gone: set[m.RunKey]
) -> list[m.RunningJob]:
    """`chosen` victims made whole: with a job's worker k, its workers after k too (a
    shrink keeps the first workers); with its gang, all of it (that is a preemption)."""
    first: dict[str, int] = {}
    for run in chosen:
        first[run.job.id] = min(
            first.get(run.job.id, run.split_from), run.split_from
        )  # -1: the gang
    keys = {r.key for r in chosen}
    more = [
        r
        for r in running
        if r.split_from >= 0
        and not r.stopping
        and r.job.id in first
        and r.split_from > first[r.job.id]
        and r.key not in keys
        and r.key not in gone
    ]
    return [*chosen, *more]


def shrinks(
    ctx: workingset.WorkingSet, taken: Mapping[str, tuple[int, str, str]], preempted: set[str]
) -> list[m.Resize]:
    """A `Resize` for each job whose workers from index k on were `taken` (job id ->
    (k, why, for which job)), unless the whole job is `preempted`."""
    out = []
    for job_id, (k, why, for_job) in sorted(taken.items()):
        run = ctx.running.get(job_id)
        if job_id in preempted or run is None:
            continue
        kept = tuple(p for p in sorted(run.placements, key=lambda p: p.worker) if p.worker < k)
        said = f"shrunk from {len(run.placements)} to {len(kept)} workers: {why}"
        out.append(m.Resize(job_id, kept, said, run.job.grace_period_s, for_job))
    return out


def grow(
    ctx: workingset.WorkingSet, failed: Sequence[tuple[m.JobRequest, m.PendingReason]]
) -> list[m.Resize]:
    """Idle GPUs to running elastic jobs below their max, the furthest below their
    queue's fair share first; none while a job waits for room."""
    if any(reason.code in _WAITS_FOR_ROOM for _, reason in failed):
        return []
    snap = ctx.snapshot
    draining = {r.job.id for r in snap.running if r.stopping}
    out = []
    for run in sorted(_growable(ctx, draining), key=lambda r: (_use(ctx, r.job.queue), r.job.id)):
        more = run.job.max_workers - len(run.placements)
        while more > 0:
            added = _place_more(ctx, run, more)
            if added is not None:
                n = len(run.placements)
                said = f"grown from {n} to {n + more} workers into idle GPUs"
                out.append(m.Resize(run.job.id, run.placements + added, said))
                break
            more //= 2
    return out


def _growable(ctx: workingset.WorkingSet, draining: set[str]) -> list[m.RunningJob]:
    """Whole running elastic jobs below their max, not resized lately, with no worker of
    theirs still draining (a grow would reuse its index)."""
    snap = ctx.snapshot
    out = []
    for run in ctx.running.values():
        job = run.job
        if not job.elastic or run.stopping or job.id in draining:
            continue
        since = run.resized_at if run.resized_at is not None else run.started_at
        if len(run.placements) < job.max_workers and (
            snap.now - since >= snap.config.resize_interval_s
        ):
            out.append(run)
    return out


def _use(ctx: workingset.WorkingSet, queue: str) -> float:
    """How far a queue is into its fair share (0: none used; 1: all of it)."""
    share = ctx.shares.get(queue)
    total = share.total.share if share is not None else 0.0
    return ctx.ledger.of(queue) / total if total > m.EPS else math.inf


def _place_more(
    ctx: workingset.WorkingSet, run: m.RunningJob, more: int
) -> tuple[m.WorkerPlacement, ...] | None:
    """`more` workers for `run`, placed as a gang within its queue's limits and off the
    GPUs its workers hold (the NCCL rule), allocated in the session; None if not."""
    job = run.job
    gang = dataclasses.replace(job, workers=more, max_workers=0)
    if ctx.ledger.over_limit(job.queue, None, ctx.est.total(gang)) is not None:
        return None
    placed = placement.place_gang(ctx.state, gang, ctx.snapshot.config.policy, explain=False)
    if not isinstance(placed, tuple):
        return None
    held = {(p.node, g) for p in run.placements for g in p.gpus}
    if job.distinct_gpus and any((p.node, g) in held for p in placed for g in p.gpus):
        return None
    if ctx.within_limits(job, placed) is not None:
        return None
    n = len(run.placements)
    added = tuple(dataclasses.replace(p, worker=n + i) for i, p in enumerate(placed))
    ctx.session.allocate(job, added)
    return added
