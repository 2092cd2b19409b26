"""One cycle's working set, built once from the snapshot.

Called by `cycle.schedule` and `explain`; handed to `admission`, `preemption` and
`reservation`. It indexes the snapshot (nodes and running jobs by name, the queue
tree), holds the mutable `Ledger` of GPUs per queue, the mutable placement
`ClusterState` and the fair shares, and caches per-queue facts so that per-job work
stays O(tree depth).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler import placement
from scheduler.core import accounting, fairshare
from scheduler.core import model as m


@dataclass(slots=True)
class Context:
    snapshot: m.Snapshot
    nodes: Mapping[str, m.Node]
    tree: accounting.QueueTree
    est: accounting.Estimator
    ledger: accounting.Ledger
    state: placement.ClusterState
    capacity: accounting.Amounts
    demand: Mapping[str, accounting.Amounts]
    running: Mapping[str, m.RunningJob]
    # Running jobs a victim may be chosen from: only those counted as over their
    # queue's guarantee when preemptible is None (see `over_guarantee`).
    over_guarantee: frozenset[str]
    model_limited: frozenset[str]  # queues with a per-model limit on their chain
    used_by_model: dict[str, float] = field(default_factory=dict)
    shares: Mapping[str, fairshare.QueueShare] = field(default_factory=dict)

    @staticmethod
    def build(snapshot: m.Snapshot) -> Context:
        nodes = {n.name: n for n in snapshot.nodes}
        tree = accounting.QueueTree.build(snapshot.queues)
        est = accounting.Estimator(snapshot.nodes)
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
        return Context(
            snapshot=snapshot,
            nodes=nodes,
            tree=tree,
            est=est,
            ledger=ledger,
            # Sorted: placement (its FGD workload mix) depends on the order it is given.
            state=placement.ClusterState.build(
                snapshot.nodes, sorted(snapshot.running, key=lambda r: r.job.id)
            ),
            capacity=accounting.capacity(snapshot.nodes),
            demand=demand,
            running={r.job.id: r for r in snapshot.running},
            over_guarantee=over_guarantee(tree, snapshot.running, nodes),
            model_limited=limited,
            used_by_model=used,
        )

    def usage_of(self, placements: Sequence[m.WorkerPlacement]) -> dict[str, float]:
        """GPUs placements hold, in total and per model of their nodes."""
        use: dict[str, float] = defaultdict(float)
        for p in placements:
            gpus = len(p.gpus) * p.fraction
            use[m.TOTAL] += gpus
            node = self.nodes.get(p.node)
            use[node.gpu_model if node is not None else ""] += gpus
        return dict(use)

    def commit(self, job: m.JobRequest, placements: Sequence[m.WorkerPlacement]) -> None:
        """Record an admission in the cluster state and the queue ledger."""
        self.state.allocate(job.id, tuple(placements), request=job)
        use = self.usage_of(placements)
        self.ledger.add(job.queue, use)
        for key, amount in use.items():
            self.used_by_model[key] = self.used_by_model.get(key, 0.0) + amount


def over_guarantee(
    tree: accounting.QueueTree, running: Sequence[m.RunningJob], nodes: Mapping[str, m.Node]
) -> frozenset[str]:
    """Running jobs that lie (at least partly) beyond their queue's guarantee.

    A queue's jobs are stacked most valuable first (higher priority, then longer
    running); those whose stack top passes the guarantee are the borrowed ones."""
    by_queue: dict[str, list[m.RunningJob]] = defaultdict(list)
    for run in running:
        by_queue[run.job.queue].append(run)
    out: set[str] = set()
    for name, runs in by_queue.items():
        q = tree.queues.get(name)
        guarantee = accounting.guaranteed(q, m.TOTAL) if q is not None else 0.0
        runs.sort(key=lambda r: (-r.job.priority, r.started_at, r.job.id))
        stacked = 0.0
        for run in runs:
            stacked += accounting.placed_gpus(run.placements)
            if stacked > guarantee + m.EPS:
                out.add(run.job.id)
    return frozenset(out)


def preemptible(ctx: Context, run: m.RunningJob) -> bool:
    """Whether a running job may be a victim at all (min runtime aside)."""
    if run.stopping:
        return False
    if run.job.preemptible is not None:
        return run.job.preemptible
    return run.job.id in ctx.over_guarantee
