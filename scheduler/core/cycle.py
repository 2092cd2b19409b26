"""One scheduling cycle: a snapshot in, decisions out.

`schedule` is called by the scheduler loop, the simulator and the benchmarks; `explain`
runs the same steps through `run` to show how a job fared. Pure and deterministic: the
same snapshot gives the same decisions (every order is sorted, ties broken by name).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler import model as m
from scheduler.core import (
    admission,
    elastic,
    invariants,
    ordering,
    preemption,
    reasons,
    workingset,
)


@dataclass(slots=True)
class Run:
    """A cycle's result with its working set, for `explain`."""

    result: m.CycleResult
    ctx: workingset.WorkingSet
    ordered: list[m.JobRequest]
    after_admission: int  # session checkpoint before preemption plans changed it


def run(snapshot: m.Snapshot) -> Run:
    # 1. Index the snapshot: queue tree, GPUs per queue, free cluster state.
    # 2. Fair share of every queue (hierarchical weighted water-filling).
    ctx = workingset.with_fair_shares(snapshot)
    # 3. Check that what runs still satisfies policy.
    violations = invariants.check(snapshot)
    # 4. Order pending jobs: within-guarantee work first, furthest below fair share next.
    ordered = ordering.order_pending(snapshot.pending, ctx.tree, ctx.shares, ctx.ledger, ctx.est)
    # 5. Admit in order: limits, then whole-gang placement; starving jobs go first and
    #    reserve room they cannot get yet (lower jobs backfill only if they end in time).
    admitted = admission.admit(ctx, ordered)
    mark = ctx.session.checkpoint()
    # 6. Reclaim and preempt for what did not fit, shrinking elastic jobs first; those
    #    jobs wait for their victims. Then idle GPUs go to elastic jobs, if no job waits
    #    (and no job waits for victims: the session counts their room as free already).
    preempts, shrinks, waiting = preemption.preempt(ctx, admitted.failed)
    grows = [] if preempts or shrinks or waiting else elastic.grow(ctx, admitted.failed)
    # 7. Every job not placed keeps a reason.
    pending = [
        m.KeepPending(job.id, waiting.get(job.id, reason)) for job, reason in admitted.failed
    ]
    pending += [
        m.KeepPending(job.id, reasons.unknown_queue(job))
        for job in sorted(snapshot.pending, key=lambda j: j.id)
        if job.queue not in ctx.tree.queues
    ]
    result = m.CycleResult(
        places=tuple(admitted.places),
        preempts=tuple(preempts),
        pending=tuple(pending),
        violations=tuple(violations),
        resizes=(*shrinks, *grows),
    )
    return Run(result, ctx, ordered, mark)


def schedule(snapshot: m.Snapshot) -> m.CycleResult:
    """Decide one cycle: jobs to place, jobs to preempt, reasons for the rest."""
    return run(snapshot).result
