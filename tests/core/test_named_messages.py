"""Messages name jobs as people know them: `name (id)`."""

from __future__ import annotations

import dataclasses

from support.builders import job, nodes, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle


def test_preemption_messages_carry_job_names() -> None:
    victim = dataclasses.replace(job("b1", "b").gpu(8).obj(), name="borrower")
    waiting = dataclasses.replace(job("a1", "a").gpu(4).obj(), name="owner")
    snap = snapshot(
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [on(victim, "n0", started=0.0)],
        [waiting],
    )
    result = cycle.schedule(snap)
    (pre,) = result.preempts
    assert "owner (a1)" in pre.reason
    (keep,) = result.pending
    assert keep.reason.code is m.ReasonCode.WAITING_FOR_PREEMPTION
    assert "borrower (b1)" in keep.reason.message


def test_a_job_without_a_name_is_named_by_its_id() -> None:
    assert m.JobRequest(id="x1", queue="q").label == "x1"
