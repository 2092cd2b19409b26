"""Issue 35: an elastic job's workers beyond its gang are borrowed room, so a job whose
queue is within its fair share shrinks them before it waits (the rule reclaim follows
for a guarantee, minimum runtime included), where they used to keep it pending on
Fragmentation for the elastic job's whole runtime."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import advance, job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle, invariants, timing, workingset

MIN_RUNTIME = m.Config().min_runtime_s
NODES = [node("n0", 4), node("n1", 4)]


def grown(queue_name: str = "a", most: int = 4, preemptible: bool | None = None) -> m.RunningJob:
    """An elastic job (gang 2) grown to 4 over both nodes: workers 0 and 1 on n0, the
    grown workers 2 and 3 on n1, started at 0."""
    el = job("el", queue_name).workers(2).elastic(most).preemptible(preemptible).obj()
    where = [("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1)]
    placements = tuple(m.WorkerPlacement(w, n, (g,), 1.0) for w, (n, g) in enumerate(where))
    return m.RunningJob(el, placements, 0.0)


def big(queue_name: str = "b") -> m.JobRequest:
    """Four GPUs on one node: it fits only a node the elastic job's grown workers leave."""
    return job("big", queue_name).gpu(4).submitted(100.0).obj()


@dataclasses.dataclass(frozen=True)
class Case:
    why: str
    queues: tuple[m.Queue, ...]
    now: float = 10_000.0
    elastic: m.RunningJob = dataclasses.field(default_factory=grown)
    also: tuple[m.RunningJob, ...] = ()
    others: tuple[m.JobRequest, ...] = ()  # pending beside it
    shrinks_to: int | None = 2  # None: no resize this cycle
    code: m.ReasonCode = m.ReasonCode.WAITING_FOR_PREEMPTION
    says: str = "shrinking el by 2"


EVEN = (queue("a").obj(), queue("b").obj())  # no guarantees, equal weights: 4 and 4

CASES = [
    Case("b's fair share is 4 and it uses none: the grown workers go", EVEN),
    Case(
        "the same with a larger max: a's fair share is 4 too, it is still borrowed room",
        EVEN,
        elastic=grown(most=8),
    ),
    Case(
        "b's guarantee is 2: beyond it, but within its fair share, the grown workers go",
        (queue("a").obj(), queue("b").guarantee(2).obj()),
    ),
    Case(
        "before the minimum runtime: it waits for it, and says until when",
        EVEN,
        now=MIN_RUNTIME / 2,
        shrinks_to=None,
        says="become preemptible at",
    ),
    Case(
        "a wants 4 more too, weight 3 to 1: b's fair share is 2, it waits, nothing shrinks",
        (queue("a").weight(3).obj(), queue("b").obj()),
        others=(job("more", "a").gpu(4).submitted(200.0).obj(),),
        shrinks_to=None,
        code=m.ReasonCode.FRAGMENTATION,
        says="",
    ),
    Case(
        "b already holds 2 of its fair share of 4: 2 + 4 is over it, it waits",
        EVEN,
        also=(
            m.RunningJob(
                job("b2", "b").workers(2).obj(),
                (m.WorkerPlacement(0, "n0", (2,), 1.0), m.WorkerPlacement(1, "n0", (3,), 1.0)),
                0.0,
            ),
        ),
        shrinks_to=None,
        code=m.ReasonCode.NO_NODE,  # 2 GPUs free in all
        says="",
    ),
    Case(
        "a's guarantee of 4 covers the grown workers: never taken for a fair share",
        (queue("a").guarantee(4).obj(), queue("b").obj()),
        shrinks_to=None,
        code=m.ReasonCode.FRAGMENTATION,
        says="",
    ),
    Case(
        "a job that may not be preempted is not shrunk either",
        EVEN,
        elastic=grown(preemptible=False),
        shrinks_to=None,
        code=m.ReasonCode.FRAGMENTATION,
        says="",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_a_job_within_its_fair_share_shrinks_grown_workers_before_it_waits(case: Case) -> None:
    snap = snapshot(
        NODES, case.queues, [case.elastic, *case.also], [big(), *case.others], now=case.now
    )
    ctx = workingset.with_fair_shares(snap)
    result = cycle.schedule(snap)
    assert result.places == () and result.preempts == ()
    reason = {k.job_id: k.reason for k in result.pending}["big"]
    assert reason.code is case.code and case.says in reason.message, reason
    if case.shrinks_to is None:
        assert result.resizes == ()
        return
    assert ctx.shares["b"].total.share >= 4  # the case is what the issue describes
    assert ctx.shares["b"].total.guaranteed < 4  # not a reclaim for its guarantee
    (shrink,) = result.resizes
    assert (shrink.job_id, shrink.workers, shrink.for_job) == ("el", case.shrinks_to, "big")
    assert shrink.placements == case.elastic.placements[: case.shrinks_to]  # gang on n0 stays
    assert "within its fair share" in shrink.reason and "for job big" in shrink.reason


def drained(snap: m.Snapshot, result: m.CycleResult, now: float) -> m.Snapshot:
    """`advance`, with a shrink's removed workers still draining (a stopping entry)."""
    after = advance(snap, result, now)
    left = []
    for r in result.resizes:
        run = next(x for x in snap.running if x.job.id == r.job_id)
        gone = tuple(p for p in run.placements if p.worker >= r.workers)
        if gone:
            left.append(
                dataclasses.replace(run, placements=gone, stopping=True, split_from=r.workers)
            )
    return dataclasses.replace(after, running=(*after.running, *left))


def test_the_job_runs_once_the_removed_workers_are_gone_and_the_elastic_job_regrows() -> None:
    snap = snapshot(NODES, EVEN, [grown()], [big()], now=10_000.0)
    first = cycle.schedule(snap)
    assert [r.workers for r in first.resizes] == [2]
    # While the removed workers drain, their room is promised to it: nothing else moves.
    draining = drained(snap, first, 10_001.0)
    second = cycle.schedule(draining)
    assert second.places == () and second.resizes == () and second.preempts == ()
    reason = {k.job_id: k.reason for k in second.pending}["big"]
    assert reason.code is m.ReasonCode.WAITING_FOR_PREEMPTION and "waiting for el" in (
        reason.message
    )
    gone = advance(snap, first, 10_030.0)
    third = cycle.schedule(gone)
    (place,) = third.places
    assert place.job_id == "big" and {p.node for p in place.placements} == {"n1"}
    running = advance(gone, third, 10_031.0)
    assert not invariants.check(running)
    # Nothing waits any more: the elastic job grows back into n0's idle GPUs (once its
    # resize interval has passed), and no one shrinks it again.
    later = dataclasses.replace(running, now=10_031.0 + m.Config().resize_interval_s)
    (regrow,) = cycle.schedule(later).resizes
    assert regrow.workers == 4 and {p.node for p in regrow.placements} == {"n0"}
    settled = advance(later, cycle.schedule(later), later.now + 1)
    assert cycle.schedule(settled).resizes == ()


def test_the_end_of_the_minimum_runtime_is_a_change_the_simulator_waits_for() -> None:
    # Before it, the job waits on the young grown workers; `timing` must name the
    # instant they become victims, or the simulator would skip past the shrink.
    snap = snapshot(NODES, EVEN, [grown()], [big()], now=MIN_RUNTIME / 2)
    assert timing.next_change(snap) == MIN_RUNTIME


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.sampled_from([4, 8]),
    gang=st.integers(1, 3),
    extra=st.integers(1, 4),
    need=st.integers(1, 8),
    weight_b=st.sampled_from([1.0, 2.0, 3.0]),
    guarantee_a=st.sampled_from([0.0, 1.0, 2.0]),
    old=st.booleans(),
)
def test_a_grown_job_never_keeps_a_job_within_its_fair_share_waiting(
    gpus: int,
    gang: int,
    extra: int,
    need: int,
    weight_b: float,
    guarantee_a: float,
    old: bool,
) -> None:
    # Queue a's elastic job: its gang on n0, `extra` grown workers on n1. Queue b's job
    # wants `need` GPUs on one node. Whenever b's fair share has room for it and it would
    # fit with a's borrowed workers (those beyond a's guarantee) gone, it is placed
    # within three cycles (once they are old enough); a is never shrunk below its gang
    # or into its guarantee, and never for a job beyond its fair share.
    extra = min(extra, gpus)
    el = job("el", "a").workers(gang).elastic(gang + extra).obj()
    placements = [m.WorkerPlacement(w, "n0", (w,), 1.0) for w in range(gang)]
    placements += [m.WorkerPlacement(gang + i, "n1", (i,), 1.0) for i in range(extra)]
    run = m.RunningJob(el, tuple(placements), 0.0)
    queues = [queue("a").guarantee(guarantee_a).obj(), queue("b").weight(weight_b).obj()]
    now = 10_000.0 if old else MIN_RUNTIME / 2
    want = job("big", "b").gpu(need).obj()
    snap = snapshot([node("n0", gpus), node("n1", gpus)], queues, [run], [want], now=now)
    ctx = workingset.with_fair_shares(snap)
    within = need <= ctx.shares["b"].total.share + m.EPS
    borrowed = max(0, extra - max(0, int(guarantee_a) - gang))  # beyond a's guarantee
    fits_now = need <= gpus - gang or need <= gpus - extra
    fits_after = need <= gpus - extra + borrowed
    result = cycle.schedule(snap)
    for r in result.resizes:
        assert r.workers >= max(gang, int(guarantee_a)) and within and old and r.for_job == "big"
    if fits_now or not (within and old and fits_after):
        return
    assert [r.job_id for r in result.resizes] == ["el"], result
    shrink = result.resizes[0]
    then = drained(snap, result, now + 1)
    assert not cycle.schedule(then).places  # its workers still drain: not yet
    gone = advance(snap, result, now + 60)
    (place,) = cycle.schedule(gone).places
    assert place.job_id == "big" and shrink.workers >= gang
