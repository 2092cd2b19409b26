"""A job's earlier attempt still draining while the job runs again: two running entries
with one job id, told apart by `RunningJob.key` (job id, attempt), never by a renamed id."""

from __future__ import annotations

import dataclasses

from support.builders import job, node, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle, explain


def _two_attempts() -> m.Snapshot:
    """Queue a, below its guarantee, reclaims a GPU from queue b's job x, whose attempt 2
    still drains on GPU 1 while attempt 3 runs on GPU 0."""
    x = job("x", "b").gpu(1).obj()
    current = dataclasses.replace(on(x, "n0", first_gpu=0), attempt=3)
    draining = dataclasses.replace(on(x, "n0", first_gpu=1, stopping=True), attempt=2)
    y = job("y", "a").gpu(1).obj()
    queues = [queue("a").guarantee(1).obj(), queue("b").obj()]
    return snapshot([node("n0", gpus=2)], queues, [current, draining], [y])


def test_both_attempts_hold_their_gpus_and_the_reason_names_the_job() -> None:
    result = cycle.schedule(_two_attempts())
    assert result.places == ()  # neither entry's GPU was lost to the other
    assert result.preempts == ()  # the draining attempt's GPU is the one counted on
    (keep,) = result.pending
    assert keep.job_id == "y"
    assert keep.reason.code is m.ReasonCode.WAITING_FOR_PREEMPTION
    assert keep.reason.details["stopping"] == ["x"]
    assert "waiting for x to stop" in keep.reason.message


def test_explain_shows_the_current_attempt() -> None:
    got = explain.explain(_two_attempts(), "x")
    assert got.decision == "running"
    assert [p["gpus"] for p in got.placements] == [(0,)]


def test_keys_differ_by_attempt() -> None:
    snap = _two_attempts()
    assert {r.key for r in snap.running} == {m.RunKey("x", 3), m.RunKey("x", 2)}
