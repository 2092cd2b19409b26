"""Ordering across and within queues, and reservations with Slurm-style backfill."""

from __future__ import annotations

import dataclasses

import pytest
from support.builders import job, nodes, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

R = m.ReasonCode


def order_of(snap: m.Snapshot) -> list[str]:
    return [j.id for j in cycle.run(snap).ordered]


def test_within_queue_priority_then_submission_then_id() -> None:
    pending = [
        job("late", "q").submitted(20).obj(),
        job("early", "q").submitted(10).obj(),
        job("urgent", "q").priority(5).submitted(30).obj(),
        job("b-tie", "q").submitted(10).obj(),
    ]
    snap = snapshot(nodes(1), [queue("q").obj()], pending=pending)
    assert order_of(snap) == ["urgent", "b-tie", "early", "late"]


def test_queue_furthest_below_fair_share_goes_first() -> None:
    # Both queues are entitled to 4; "busy" already holds 3 of them, "idle" none.
    queues = [queue("busy").guarantee(0).obj(), queue("idle").guarantee(0).obj()]
    running = [on(job("r", "busy").gpu(3).obj(), "n0")]
    pending = [job("b1", "busy").submitted(0).obj(), job("i1", "idle").submitted(50).obj()]
    snap = snapshot(nodes(1), queues, running, pending)
    assert order_of(snap)[0] == "i1"


def test_order_interleaves_queues_as_usage_grows() -> None:
    queues = [queue("a").obj(), queue("b").obj()]
    pending = [job(f"a{i}", "a").submitted(i).obj() for i in range(3)]
    pending += [job(f"b{i}", "b").submitted(10 + i).obj() for i in range(3)]
    snap = snapshot(nodes(1), queues, pending=pending)
    assert order_of(snap) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_work_within_guarantee_goes_before_borrowing() -> None:
    queues = [queue("g").guarantee(2).obj(), queue("nog").weight(10).obj()]
    pending = [job("borrow", "nog").submitted(0).obj(), job("owed", "g").submitted(99).obj()]
    snap = snapshot(nodes(1), queues, pending=pending)
    assert order_of(snap)[0] == "owed"


def reservation_case(r1_runtime: float | None) -> m.Snapshot:
    """n0: 4 of 8 GPUs busy until ~1300; n1: all 8 busy for long. A starving 8-GPU
    job and two 4-GPU gap-fillers, one of which ends by 1200."""
    r1, r2 = job("r1", "q").gpu(4).obj(), job("r2", "q").gpu(8).obj()
    if r1_runtime is not None:  # else neither declares one
        r1 = job("r1", "q").gpu(4).runtime(r1_runtime).obj()
        r2 = job("r2", "q").gpu(8).runtime(10_000).obj()
    running = [on(r1, "n0", 0, started=800.0), on(r2, "n1", 0, started=800.0)]
    pending = [
        job("big", "q").gpu(8).submitted(0).obj(),
        job("gap-long", "q").gpu(4).submitted(900).obj(),
        job("gap-short", "q").gpu(4).runtime(200).submitted(950).obj(),
    ]
    return snapshot(
        nodes(2), [queue("q").obj()], running, pending, config=m.Config(preemption=False)
    )


def test_reservation_holds_room_and_short_jobs_backfill() -> None:
    result = cycle.schedule(reservation_case(500.0))
    reasons = {k.job_id: k.reason for k in result.pending}
    assert {p.job_id for p in result.places} == {"gap-short"}
    assert reasons["gap-long"].code == R.RESERVED
    assert "reserved for job big" in reasons["gap-long"].message
    assert reasons["big"].details["estimated_start"] == pytest.approx(1300.0)
    assert reasons["big"].details["reserved_nodes"] == ["n0"]


def test_without_max_runtime_reserved_room_is_simply_held() -> None:
    result = cycle.schedule(reservation_case(None))
    reasons = {k.job_id: k.reason for k in result.pending}
    assert result.places == ()
    assert reasons["gap-short"].code == R.RESERVED
    assert reasons["big"].details["estimated_start"] is None


def test_no_reservation_before_starvation() -> None:
    snap = dataclasses.replace(reservation_case(500.0), now=500.0)
    result = cycle.schedule(snap)
    assert {p.job_id for p in result.places} == {"gap-long"}
