"""Admission: try each pending job in order, quota first, then gang placement.

Called by `cycle.schedule` once per cycle with the ordered pending jobs. Starving jobs
go first; one that does not fit gets a reservation (`reservation`), which binds every
job after it. A job is admitted whole (every worker placed) or not at all; its queue
and every ancestor stay within their limits, in total and per GPU model (a job that
may run on several models is steered away from models whose limit is reached).
An elastic job starts at the most workers its queue's fair share allows, at least its
gang (`elastic.start_size`). Placement failures of one request shape are remembered
for the rest of the cycle: the cluster only fills up during admission, so a shape that
failed fails again (backfill jobs still try the held room, which only they may use).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler import model as m
from scheduler import placement
from scheduler.core import accounting, elastic, reasons, reservation, workingset

# Everything placement reads of a job but its id: two jobs of one shape fit the same room.
Shape = tuple[int, float, int | None, int, int, tuple[str, ...], bool, bool, m.NodeRules | None]


@dataclass(slots=True)
class Outcome:
    places: list[m.Place] = field(default_factory=list)
    failed: list[tuple[m.JobRequest, m.PendingReason]] = field(default_factory=list)
    reservations: list[reservation.Reservation] = field(default_factory=list)


def quota(ctx: workingset.WorkingSet, job: m.JobRequest) -> m.JobRequest | m.PendingReason:
    """The job as placement should see it (GPU types narrowed to models its queues still
    have room for), or the limit it would break."""
    if job.queue not in ctx.model_limited:
        why = ctx.over(job, None, ctx.est.total(job))
        return job if why is None else why
    per = ctx.est.per_worker(job)
    allowed = ctx.est.allowed_models(job)
    fits = []
    first: m.PendingReason | None = None
    for model in allowed:
        need = job.workers * per[model]
        why = ctx.over(job, model, need)
        if why is None:
            fits.append(model)
        elif first is None:
            first = why
    if not fits and first is not None:
        return first
    if len(fits) < len(allowed):
        return dataclasses.replace(job, gpu_types=tuple(fits))
    return job


def _place(
    ctx: workingset.WorkingSet, job: m.JobRequest, ignore: Sequence[reservation.Reservation]
) -> tuple[m.WorkerPlacement, ...] | m.PendingReason:
    """Place with the holds of `ignore` lifted (the state is left unchanged)."""
    if not ignore:
        return placement.place_gang(ctx.state, job, ctx.snapshot.config.policy)
    with ctx.session.trial():
        for res in ignore:
            ctx.session.lift(res.job_id)
        return placement.place_gang(ctx.state, job, ctx.snapshot.config.policy)


def _shape(job: m.JobRequest) -> Shape:
    return (
        job.workers,
        job.gpu,
        job.gpu_memory_mib,
        job.cpu_milli,
        job.memory_mib,
        job.gpu_types,
        job.distinct_gpus,
        job.enforced_only,
        job.nodes,
    )


def _larger(ctx: workingset.WorkingSet, job: m.JobRequest, out: Outcome) -> bool:
    """An elastic job placed at the most workers within its queue's fair share, when that
    is more than its gang and fits as it is (the gang alone goes the usual way)."""
    size = elastic.start_size(ctx, job)
    if size <= job.workers:
        return False
    checked = quota(ctx, dataclasses.replace(job, workers=size))
    if isinstance(checked, m.PendingReason):
        return False
    placed = placement.place_gang(ctx.state, checked, ctx.snapshot.config.policy, explain=False)
    if not isinstance(placed, tuple) or ctx.within_limits(job, placed) is not None:
        return False
    ctx.session.allocate(job, placed)
    out.places.append(m.Place(job.id, placed))
    return True


def _try(
    ctx: workingset.WorkingSet,
    job: m.JobRequest,
    out: Outcome,
    failures: dict[Shape, m.PendingReason],
) -> m.PendingReason | None:
    if job.elastic and _larger(ctx, job, out):
        return None
    checked = quota(ctx, job)
    if isinstance(checked, m.PendingReason):
        return checked
    now = ctx.snapshot.now
    shape = _shape(checked)
    backfill = [r for r in out.reservations if reservation.may_backfill(job, r, now)]
    cached = failures.get(shape)
    result: tuple[m.WorkerPlacement, ...] | m.PendingReason | None = None
    if cached is None:
        result = placement.place_gang(ctx.state, checked, ctx.snapshot.config.policy)
    if not isinstance(result, tuple) and backfill:
        result = _place(ctx, checked, backfill)
        if isinstance(result, tuple):
            # Backfill: it ends before the reservations start, so it may use their room.
            for res in backfill:
                ctx.session.lift(res.job_id)
    if isinstance(result, tuple):
        over = ctx.within_limits(job, result)
        if over is None:
            ctx.session.allocate(job, result)
            out.places.append(m.Place(job.id, result))
        for res in backfill:
            if not ctx.session.held(res.job_id):
                reservation.hold(ctx, res)
        return over
    if cached is not None:
        reason = cached
    else:
        assert isinstance(result, m.PendingReason)
        reason = result
        if out.reservations:
            # Would it fit but for the held room? Then the reservation is the reason.
            free = _place(ctx, checked, out.reservations)
            if isinstance(free, tuple):
                used = {p.node for p in free}
                holder = next(
                    (r for r in out.reservations if used & set(r.nodes)), out.reservations[0]
                )
                reason = reasons.reserved(job, holder.job_id, holder.nodes, holder.start, now)
        failures[shape] = reason
    if reservation.starving(job, ctx.snapshot) and len(out.reservations) < (
        reservation.MAX_RESERVATIONS
    ):
        made = reservation.reserve(ctx, checked)
        if made is not None:
            reservation.hold(ctx, made)
            out.reservations.append(made)
            failures.clear()  # the held room changes what fits
            reason = reasons.with_reservation(reason, made.nodes, made.start, now)
    return reason


def _inside(ctx: workingset.WorkingSet, job: m.JobRequest) -> bool:
    """Whether the job, admitted now, keeps its queue within its total guarantee."""
    guarantee = accounting.guaranteed(ctx.tree.queues[job.queue], m.TOTAL)
    return ctx.ledger.of(job.queue) + ctx.est.total(job) <= guarantee + m.EPS


def admit(ctx: workingset.WorkingSet, ordered: Sequence[m.JobRequest]) -> Outcome:
    """Admit what fits, in order; the rest with their reasons. Two passes: first the
    jobs that fit inside their queue's guarantee given what this cycle admitted so far,
    then the borrowing rest; starving jobs first within each. So a starving borrower
    cannot take the room a queue below its guarantee has just reclaimed (it would be
    reclaimed again next cycle, and so on)."""
    out = Outcome()
    failures: dict[Shape, m.PendingReason] = {}
    first = [j for j in ordered if reservation.starving(j, ctx.snapshot)]
    first += [j for j in ordered if not reservation.starving(j, ctx.snapshot)]
    borrowing: list[m.JobRequest] = []
    for job in first:
        if not _inside(ctx, job):
            borrowing.append(job)
            continue
        reason = _try(ctx, job, out, failures)
        if reason is not None:
            out.failed.append((job, reason))
    for job in borrowing:
        reason = _try(ctx, job, out, failures)
        if reason is not None:
            out.failed.append((job, reason))
    return out
