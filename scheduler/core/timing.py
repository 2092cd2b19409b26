"""When the core's decisions about one snapshot could next change as time alone passes.

`schedule` compares `Snapshot.now` with the snapshot's own times in three places only:
a running job becomes a preemption victim once it has run `Config.min_runtime_s`
(`preemption`), a pending job starves after `Config.starvation_s` and then goes first
and reserves room (`reservation.starving`), and a job may backfill held room only while
`now + max_runtime_s` ends before the reservation's estimated start
(`reservation.may_backfill`). Until the earliest of those instants, the same snapshot at
a later `now` gets the same decisions (only the wording of reasons such as "in 40s"
changes). The simulator uses this to skip idle ticks without changing what happens.
A new rule that compares `now` must add its instant here.
"""

from __future__ import annotations

from scheduler import model as m
from scheduler.core import accounting, elastic, workingset


def next_change(snapshot: m.Snapshot) -> float | None:
    """The earliest time >= `snapshot.now` at which a rule above may flip; None: never."""
    now, cfg = snapshot.now, snapshot.config
    times: list[float] = []
    if cfg.preemption:
        times.extend(r.started_at + cfg.min_runtime_s for r in _may_be_victims(snapshot))
    times.extend(j.submitted_at + cfg.starvation_s for j in snapshot.pending)
    # A reservation's start is one of these ends; backfill stops being allowed at
    # start - max_runtime_s (taken without the EPS slack: a little early is harmless).
    ends = [
        r.started_at + r.job.max_runtime_s
        for r in snapshot.running
        if r.job.max_runtime_s is not None
    ]
    for j in snapshot.pending:
        if j.max_runtime_s is not None:
            times.extend(e - j.max_runtime_s for e in ends)
    return min((t for t in times if t >= now), default=None)


def _may_be_victims(snapshot: m.Snapshot) -> list[m.RunningJob]:
    """The running jobs whose end of minimum runtime may matter: those `preemption`
    could pick as a victim for some pending job (eligible, and lower priority in the job's
    queue, or in another queue while the job's queue has room under its guarantee for it,
    computed as `preemption.preempt` does before it commits any plan, or an elastic job's
    worker beyond its gang, which a job of another queue within its fair share may take).
    A superset: the pending jobs are not filtered by their reason, the GPU models they
    may use or (for a grown worker) their fair share. Any other running job turning old
    enough changes no decision, only a reason's wording."""
    tree = accounting.QueueTree.build(snapshot.queues)
    nodes = {n.name: n for n in snapshot.nodes}
    running = elastic.split(snapshot.running)  # as the cycle sees them
    ledger = accounting.build_ledger(tree, running, nodes)
    est = accounting.PendingGpus(snapshot.nodes)
    over = workingset.over_guarantee(tree, running, nodes)
    takers: list[tuple[str, int, bool]] = []  # (queue, priority, may reclaim)
    for job in snapshot.pending:
        if job.queue not in tree.queues:
            continue
        room = accounting.guaranteed(tree.queues[job.queue], m.TOTAL) - ledger.of(job.queue)
        takers.append((job.queue, job.priority, est.total(job) <= room + m.EPS))
    out = []
    for r in running:
        if r.stopping or r.job.queue not in tree.queues:
            continue
        if not (r.job.preemptible if r.job.preemptible is not None else r.key in over):
            continue
        if any(
            r.job.priority < prio if q == r.job.queue else reclaim or r.split_from >= 0
            for q, prio, reclaim in takers
        ):
            out.append(r)
    return out
