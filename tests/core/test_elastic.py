"""Elastic jobs in the core (issue 29 part 2): the size a job starts at, growing into
idle GPUs, shrinking before any preemption, and the rules that hold at every size."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import advance, job, node, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle, invariants

LATER = 10_000.0  # past every min runtime and resize interval


def two_queues(a: float = 8, b: float = 8) -> list[m.Queue]:
    return [queue("a").guarantee(a).obj(), queue("b").guarantee(b).obj()]


def grown_to(run: m.RunningJob, size: int, started: float = 0.0) -> m.RunningJob:
    """`run` with `size` workers, one GPU each, on its node's first GPUs."""
    node_name = run.placements[0].node
    placements = tuple(m.WorkerPlacement(w, node_name, (w,), 1.0) for w in range(size))
    return dataclasses.replace(run, placements=placements, started_at=started)


@pytest.mark.parametrize(
    ("guarantees", "other_pending", "starts_at"),
    [
        ((8, 8), False, 8),  # alone: its fair share is the whole idle cluster
        ((8, 8), True, 4),  # queue b waits for 8 too: half each
        ((6, 2), True, 6),  # fair share follows the guarantees
    ],
)
def test_starts_at_the_most_workers_its_fair_share_allows(
    guarantees: tuple[float, float], other_pending: bool, starts_at: int
) -> None:
    elastic = job("el", "a").workers(2).elastic(8).obj()
    pending = [elastic]
    if other_pending:
        pending.append(job("rigid", "b").workers(8).submitted(5).obj())
    snap = snapshot([node("n0")], two_queues(*guarantees), pending=pending)
    result = cycle.schedule(snap)
    placed = {p.job_id: p.placements for p in result.places}
    assert len(placed["el"]) == starts_at
    assert sorted(p.worker for p in placed["el"]) == list(range(starts_at))


def test_starts_at_its_gang_when_only_that_fits() -> None:
    busy = on(job("busy", "b").workers(6).obj(), "n0")
    elastic = job("el", "a").workers(2).elastic(8).obj()
    result = cycle.schedule(snapshot([node("n0")], two_queues(), [busy], [elastic]))
    assert [len(p.placements) for p in result.places] == [2]


def test_grows_into_idle_gpus_once_the_resize_interval_has_passed() -> None:
    run = on(job("el", "a").workers(2).elastic(6).obj(), "n0")
    early = snapshot([node("n0")], two_queues(), [run], now=100.0)
    assert cycle.schedule(early).resizes == ()  # resize_interval_s is 300
    later = dataclasses.replace(early, now=LATER)
    (grow,) = cycle.schedule(later).resizes
    assert grow.job_id == "el" and grow.workers == 6
    assert grow.placements[:2] == run.placements  # the first workers stay where they are
    assert "grown from 2 to 6" in grow.reason
    after = advance(later, cycle.schedule(later), LATER)
    assert not invariants.check(after)
    assert cycle.schedule(dataclasses.replace(after, now=LATER + 1)).resizes == ()


def test_no_grow_while_a_job_waits_for_room() -> None:
    run = on(job("el", "a").workers(2).elastic(6).obj(), "n0")
    waiting = job("big", "b").workers(8).obj()  # 6 idle GPUs are not enough for it
    snap = snapshot([node("n0")], two_queues(), [run], [waiting], now=LATER)
    result = cycle.schedule(snap)
    assert result.resizes == () and [k.job_id for k in result.pending] == ["big"]


def test_grows_only_within_its_queue_limit() -> None:
    run = on(job("el", "a").workers(2).elastic(8).obj(), "n0")
    queues = [queue("a").guarantee(2).limit(5).obj(), queue("b").guarantee(2).obj()]
    (grow,) = cycle.schedule(snapshot([node("n0")], queues, [run], now=LATER)).resizes
    assert grow.workers == 5  # 6 more would break the limit of 5; it halves its ask to 3


def test_reclaim_shrinks_the_elastic_borrower_instead_of_preempting() -> None:
    elastic = grown_to(on(job("el", "a").workers(2).elastic(8).obj(), "n0"), 8)
    snap = snapshot([node("n0")], two_queues(4, 4), [elastic], [job("r", "b").workers(3).obj()])
    result = cycle.schedule(dataclasses.replace(snap, now=LATER))
    assert result.preempts == ()
    (shrink,) = result.resizes
    assert (shrink.job_id, shrink.workers) == ("el", 5)
    assert [p.worker for p in shrink.placements] == [0, 1, 2, 3, 4]  # the newest go
    assert "shrunk from 8 to 5" in shrink.reason and "reclaimed for job r" in shrink.reason
    reason = {k.job_id: k.reason for k in result.pending}["r"]
    assert reason.code is m.ReasonCode.WAITING_FOR_PREEMPTION and "shrinking el by 3" in (
        reason.message
    )


def test_a_shrink_is_chosen_over_a_rigid_borrower() -> None:
    rigid = on(job("rigid", "a").workers(4).obj(), "n0", first_gpu=4)
    elastic = grown_to(on(job("el", "a").workers(2).elastic(4).obj(), "n0"), 4)
    snap = snapshot([node("n0")], two_queues(0, 8), [rigid, elastic], [job("r", "b").obj()])
    result = cycle.schedule(dataclasses.replace(snap, now=LATER))
    assert result.preempts == () and [(r.job_id, r.workers) for r in result.resizes] == [("el", 3)]


def test_never_below_the_gang_then_the_whole_job_goes() -> None:
    elastic = grown_to(on(job("el", "a").workers(2).elastic(4).obj(), "n0"), 4)
    filler = on(job("fill", "a").workers(4).obj(), "n0", first_gpu=4)
    snap = snapshot(
        [node("n0")],
        two_queues(0, 8),
        [elastic, filler],
        [job("r", "b").workers(7).preemptible(False).obj()],
    )
    result = cycle.schedule(dataclasses.replace(snap, now=LATER))
    # 7 GPUs: both whole jobs go; the elastic one is preempted, not shrunk as well.
    assert sorted(p.job_id for p in result.preempts) == ["el", "fill"]
    assert result.resizes == ()


def test_a_grow_keeps_the_nccl_rule() -> None:
    one_gpu = m.Node("n0", 64_000, 512_000, 1, "H100", 81_920)
    two_gpus = m.Node("n1", 64_000, 512_000, 2, "H100", 81_920)
    el = job("el", "a").gpu(0.25).workers(1).elastic(3).distinct().obj()
    run = m.RunningJob(el, (m.WorkerPlacement(0, "n0", (0,), 0.25),), 0.0)
    snap = snapshot([one_gpu, two_gpus], two_queues(), [run], now=LATER)
    (grow,) = cycle.schedule(snap).resizes
    held = [(p.node, g) for p in grow.placements for g in p.gpus]
    assert grow.workers == 3 and len(set(held)) == 3  # never two ranks on one GPU


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(2, 8),
    most=st.integers(2, 8),
    demand=st.integers(1, 8),
    guarantee=st.sampled_from([0.0, 2.0, 4.0, 8.0]),
)
def test_any_resize_keeps_the_gang_the_max_and_the_first_workers(
    size: int, most: int, demand: int, guarantee: float
) -> None:
    most = max(most, size)
    run = grown_to(on(job("el", "a").workers(2).elastic(most).obj(), "n0"), size)
    snap = snapshot(
        [node("n0")],
        two_queues(guarantee, 8 - guarantee),
        [run],
        [job("r", "b").workers(demand).obj()],
        now=LATER,
    )
    result = cycle.schedule(snap)
    for r in result.resizes:
        assert 2 <= r.workers <= most
        kept = min(r.workers, size)
        assert r.placements[:kept] == run.placements[:kept]
    after = advance(snap, result, LATER)
    assert not [v for v in invariants.check(after) if "overcommit" in v.kind]
    shrink = next((r for r in result.resizes if r.workers < size), None)
    if shrink is not None:  # its workers drain, still holding their GPUs, beside the rest
        gone = tuple(p for p in run.placements if p.worker >= shrink.workers)
        left = dataclasses.replace(run, placements=gone, stopping=True, split_from=shrink.workers)
        after = dataclasses.replace(after, running=(*after.running, left))
        assert not [v for v in invariants.check(after) if "overcommit" in v.kind]


def test_a_queue_borrows_its_elastic_workers_not_its_rigid_jobs() -> None:
    # Queue a (guarantee 4) runs an elastic job grown to 4 and, started later, a rigid
    # one of 4: its guarantee covers the gang and the rigid job, so when b comes back
    # the elastic job's grown workers go, not the rigid job.
    elastic = grown_to(on(job("el", "a").workers(2).elastic(4).obj(), "n0"), 4)
    rigid = on(job("rigid", "a").workers(4).obj(), "n0", first_gpu=4, started=500.0)
    snap = snapshot(
        [node("n0")], two_queues(6, 2), [elastic, rigid], [job("r", "b").workers(2).obj()]
    )
    result = cycle.schedule(dataclasses.replace(snap, now=LATER))
    assert result.preempts == ()
    assert [(r.job_id, r.workers) for r in result.resizes] == [("el", 2)]
