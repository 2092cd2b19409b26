"""Property tests over random clusters and job mixes: two cycles (fill, then a second
wave with reclaim and preemption), checking what must hold whatever the input."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import advance

from scheduler import model as m
from scheduler.core import cycle, invariants, workingset
from scheduler.placement import eligible

from . import strategies

SAFETY = {
    "gpu-overcommit",
    "cpu-overcommit",
    "memory-overcommit",
    "gang-incomplete",
    "unknown-node",
    "unknown-gpu",
    "fraction-spans-gpus",
    "distinct-gpus-shared",
    "fraction-not-enforced",
    "queue-over-limit",
}
FAST = settings(max_examples=40, deadline=None)


@st.composite
def two_waves(draw: st.DrawFn) -> tuple[m.Snapshot, m.CycleResult]:
    """A cluster filled by one cycle at t=0, then a second wave of jobs at t=1000."""
    nodes = draw(strategies.clusters())
    queues = draw(strategies.queue_sets())
    names = [q.name for q in queues if q.name != "dept"]
    first = draw(strategies.jobs(names, "w", draw(st.integers(1, 12))))
    snap = m.Snapshot(tuple(nodes), tuple(queues), pending=tuple(first), now=0.0)
    snap = advance(snap, cycle.schedule(snap), now=float(draw(st.sampled_from([0, 990]))))
    second = draw(strategies.jobs(names, "x", draw(st.integers(1, 6))))
    snap = dataclasses.replace(snap, pending=snap.pending + tuple(second), now=1000.0)
    return snap, cycle.schedule(snap)


def placed(snap: m.Snapshot, result: m.CycleResult, *, victims_gone: bool) -> m.Snapshot:
    """The state once the decisions are carried out (victims still running or gone)."""
    after = advance(snap, result, snap.now)
    if victims_gone:
        return after
    victims = {p.job_id for p in result.preempts}
    kept = [r for r in snap.running if r.job.id in victims]
    for r in result.resizes:  # a shrink's workers drain as a stopping entry of their own
        run = next(x for x in snap.running if x.job.id == r.job_id)
        gone = tuple(p for p in run.placements if p.worker >= r.workers)
        if gone:
            kept.append(
                dataclasses.replace(run, placements=gone, stopping=True, split_from=r.workers)
            )
    return dataclasses.replace(after, running=after.running + tuple(kept))


@FAST
@given(two_waves())
def test_decisions_never_break_capacity_gangs_or_limits(
    case: tuple[m.Snapshot, m.CycleResult],
) -> None:
    snap, result = case
    assert not [v for v in invariants.check(snap) if v.kind in SAFETY]
    for gone in (False, True):
        after = placed(snap, result, victims_gone=gone)
        bad = [v for v in invariants.check(after) if v.kind in SAFETY]
        assert not bad, bad
    jobs = {j.id: j for j in snap.pending}
    nodes = {n.name: n for n in snap.nodes}
    for place in result.places:
        job = jobs[place.job_id]
        size = len(place.placements)
        assert sorted(p.worker for p in place.placements) == list(range(size))
        assert job.workers <= size <= max(job.workers, job.max_workers)
        refused = [eligible.refusal(job.nodes, nodes[p.node]) for p in place.placements]
        assert refused == [None] * size, (job.nodes, refused)
    running = {r.job.id: r for r in snap.running}
    for r in result.resizes:  # an elastic job keeps its first workers, within min..max
        job, before = running[r.job_id].job, running[r.job_id].placements
        assert job.workers <= r.workers <= job.max_workers
        kept = min(len(before), r.workers)
        assert (
            sorted(r.placements, key=lambda p: p.worker)[:kept]
            == sorted(before, key=lambda p: p.worker)[:kept]
        )
    decided = [p.job_id for p in result.places] + [k.job_id for k in result.pending]
    assert sorted(decided) == sorted(jobs), "every pending job is placed or has a reason"


@FAST
@given(two_waves())
def test_only_preemptible_old_enough_jobs_are_preempted(
    case: tuple[m.Snapshot, m.CycleResult],
) -> None:
    snap, result = case
    ctx = workingset.WorkingSet.build(snap)
    running = {r.job.id: r for r in snap.running}
    for pre in result.preempts:
        victim = running[pre.job_id]
        assert workingset.preemptible(ctx, victim)
        assert victim.job.preemptible is True or victim.key in ctx.over_guarantee
        assert snap.now - victim.started_at >= snap.config.min_runtime_s
        assert pre.grace_period_s == victim.job.grace_period_s
        assert pre.for_job in {k.job_id for k in result.pending}
    waiting = {
        k.job_id for k in result.pending if k.reason.code == m.ReasonCode.WAITING_FOR_PREEMPTION
    }
    assert {p.for_job for p in result.preempts} <= waiting


@FAST
@given(two_waves())
def test_same_snapshot_same_decisions(case: tuple[m.Snapshot, m.CycleResult]) -> None:
    snap, result = case
    assert cycle.schedule(snap) == result
    shuffled = dataclasses.replace(
        snap, pending=tuple(reversed(snap.pending)), running=tuple(reversed(snap.running))
    )
    assert cycle.schedule(shuffled) == result


@st.composite
def borrowed_cluster(draw: st.DrawFn) -> m.Snapshot:
    """Queue b has filled the cluster with whole-GPU work while a was idle; now a,
    under its guarantee, asks for a GPU."""
    count = draw(st.integers(1, 4))
    nodes = tuple(m.Node(f"n{i}", 64_000, 512_000, 8, "H100", 81_920) for i in range(count))
    capacity = 8 * count
    ga = float(draw(st.integers(1, capacity)))
    gb = float(draw(st.integers(0, capacity - int(ga))))
    queues = (m.Queue("a", m.Quota(ga)), m.Queue("b", m.Quota(gb)))
    sizes: list[float] = []
    for _ in range(count):  # fill every node exactly: whole GPUs, 1 or 2 a job
        left = 8
        for g in draw(st.lists(st.sampled_from([1, 2]), min_size=4, max_size=8)):
            if g <= left:
                sizes.append(float(g))
                left -= g
        sizes += [1.0] * left
    fill = tuple(
        m.JobRequest(f"b{i}", "b", gpu=g, priority=draw(st.integers(0, 2)), submitted_at=i)
        for i, g in enumerate(sizes)
    )
    snap = m.Snapshot(nodes, queues, pending=fill, now=0.0)
    snap = advance(snap, cycle.schedule(snap), now=float(draw(st.integers(0, 500))))
    ask = m.JobRequest("a-job", "a", gpu=draw(st.sampled_from([0.5, 1.0])), submitted_at=900.0)
    return dataclasses.replace(snap, pending=(*snap.pending, ask), now=1000.0)


@FAST
@given(borrowed_cluster())
def test_queue_under_guarantee_gets_its_gpus_back(snap: m.Snapshot) -> None:
    result = cycle.schedule(snap)
    placed_ids = {p.job_id for p in result.places}
    for_a = [p for p in result.preempts if p.for_job == "a-job"]
    assert "a-job" in placed_ids or for_a
    assert all(p.job_id.startswith("b") for p in for_a)
    if for_a:
        # Once the victims stop, the next cycle places it.
        nxt = advance(snap, result, now=1100.0)
        nxt = dataclasses.replace(nxt, pending=tuple(j for j in nxt.pending if j.id == "a-job"))
        assert "a-job" in {p.job_id for p in cycle.schedule(nxt).places}
