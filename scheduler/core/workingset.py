"""One cycle's working set, built once from the snapshot.

Called by `cycle.schedule` and `explain`; handed to `admission`, `preemption` and
`reservation`. It indexes the snapshot (nodes and running jobs by name, the queue
tree), holds the fair shares and the cycle `session.Session` (everything a cycle
changes, behind one undo log), and caches per-queue facts so that per-job work stays
O(tree depth).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler import model as m
from scheduler import placement
from scheduler.core import accounting, elastic, fairshare, reasons
from scheduler.core.session import Session


@dataclass(slots=True)
class WorkingSet:
    snapshot: m.Snapshot
    nodes: Mapping[str, m.Node]
    tree: accounting.QueueTree
    est: accounting.PendingGpus
    session: Session
    capacity: accounting.Amounts
    demand: Mapping[str, accounting.Amounts]
    running: Mapping[str, m.RunningJob]  # by job id: its current attempt (see `_current`)
    # Running jobs a victim may be chosen from: only those counted as over their
    # queue's guarantee when preemptible is None (see `over_guarantee`).
    over_guarantee: frozenset[m.RunKey]
    model_limited: frozenset[str]  # queues with a per-model limit on their chain
    shares: Mapping[str, fairshare.QueueShare] = field(default_factory=dict)

    @staticmethod
    def build(whole: m.Snapshot) -> WorkingSet:
        """The working set of `whole`: its elastic jobs split (`elastic.split`) in
        `snapshot`, whole in `running`."""
        snapshot = dataclasses.replace(whole, running=tuple(elastic.split(whole.running)))
        nodes = {n.name: n for n in snapshot.nodes}
        tree = accounting.QueueTree.build(snapshot.queues)
        est = accounting.PendingGpus(snapshot.nodes)
        ledger = accounting.build_ledger(tree, snapshot.running, nodes)
        demand = accounting.demand(tree, ledger, snapshot.pending, est)
        used: dict[str, float] = defaultdict(float)
        for run in snapshot.running:
            for key, amount in accounting.running_usage(run, nodes).items():
                used[key] += amount
        limited = frozenset(
            name
            for name, chain in tree.chains.items()
            if any(tree.queues[q].limit.by_model for q in chain)
        )
        # Sorted: placement (its FGD workload mix) depends on the order it is given.
        state = placement.ClusterState.build(
            snapshot.nodes, sorted(snapshot.running, key=lambda r: r.key)
        )
        return WorkingSet(
            snapshot=snapshot,
            nodes=nodes,
            tree=tree,
            est=est,
            session=Session(state, ledger, nodes, dict(used)),
            capacity=accounting.capacity(snapshot.nodes),
            demand=demand,
            running=_current(whole.running),
            over_guarantee=over_guarantee(tree, snapshot.running, nodes),
            model_limited=limited,
        )

    # Reads of the session's state (changes go through the session's methods).
    @property
    def state(self) -> placement.ClusterState:
        return self.session.state

    @property
    def ledger(self) -> accounting.Ledger:
        return self.session.ledger

    # Queue limits, for admission and for an elastic job's grow alike.
    def within_limits(
        self, job: m.JobRequest, placed: Sequence[m.WorkerPlacement]
    ) -> m.PendingReason | None:
        """The limit placing `placed` for `job` would break, exactly, once the models and
        shares are known (gpuMemory jobs, per-model limits); None if none."""
        use = self.session.usage_of(placed)
        keys = [k for k in use if k != m.TOTAL] if job.queue in self.model_limited else []
        for key in keys:
            if (why := self.over(job, key, use[key])) is not None:
                return why
        return self.over(job, None, use.get(m.TOTAL, 0.0))

    def over(self, job: m.JobRequest, model: str | None, need: float) -> m.PendingReason | None:
        """The limit `need` more GPUs (of `model`) would break, and, where raising it would
        not do, the ancestor's limit in the way too (the API refuses a child's limit above
        its parent's)."""
        hit = self.ledger.over_limit(job.queue, model, need)
        if hit is None:
            return None
        parent = self.ledger.tree.queues[hit[0]].parent
        above = self.ledger.over_limit(parent, model, need) if parent else None
        return reasons.over_limit(job, *hit, need, above=above)


def over_guarantee(
    tree: accounting.QueueTree, running: Sequence[m.RunningJob], nodes: Mapping[str, m.Node]
) -> frozenset[m.RunKey]:
    """Running jobs that lie (at least partly) beyond their queue's guarantee.

    A queue's jobs are stacked most valuable first (higher priority, then longer
    running), elastic jobs' workers beyond their gangs after every whole job; those
    whose stack top passes the guarantee are the borrowed ones. So a queue's guarantee
    covers its gangs first, and what it borrows is the workers a shrink gives back."""
    by_queue: dict[str, list[m.RunningJob]] = defaultdict(list)
    for run in running:
        by_queue[run.job.queue].append(run)
    out: set[m.RunKey] = set()
    for name, runs in by_queue.items():
        q = tree.queues.get(name)
        guarantee = accounting.guaranteed(q, m.TOTAL) if q is not None else 0.0
        runs.sort(key=lambda r: (r.split_from >= 0, -r.job.priority, r.started_at, r.key))
        stacked = 0.0
        for run in runs:
            stacked += accounting.placed_gpus(run.placements)
            if stacked > guarantee + m.EPS:
                out.add(run.key)
    return frozenset(out)


def _current(running: Sequence[m.RunningJob]) -> dict[str, m.RunningJob]:
    """Each job's entry, the one that is not stopping when an earlier attempt of the
    job still drains beside it."""
    out = {r.job.id: r for r in running if r.stopping}
    out.update((r.job.id, r) for r in running if not r.stopping)
    return out


def preemptible(ctx: WorkingSet, run: m.RunningJob) -> bool:
    """Whether a running job may be a victim at all (min runtime aside)."""
    if run.stopping:
        return False
    if run.job.preemptible is not None:
        return run.job.preemptible
    return run.key in ctx.over_guarantee


def with_fair_shares(snapshot: m.Snapshot) -> WorkingSet:
    """Steps 1 and 2 of a cycle: the snapshot indexed, and every queue's fair share.
    The dashboard and the Queue CR's status start from here too, so the share they
    show is the one the cycle orders queues by."""
    ctx = WorkingSet.build(snapshot)
    ctx.shares = fairshare.compute(ctx.tree, ctx.capacity, ctx.ledger.usage, ctx.demand)
    return ctx
