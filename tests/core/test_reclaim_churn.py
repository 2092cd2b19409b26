"""Table-driven multi-cycle tests of reclaim: each case is a starting snapshot and the
decisions expected of each of a sequence of cycles, with every cycle's decisions
carried into the next snapshot (`advance`: placed jobs run, preempted jobs go back to
pending). Reclaim must settle: the queue below its guarantee gets its GPUs and keeps
them, instead of the borrowing queue taking the reclaimed room back every cycle."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.builders import advance, job, node, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

STEP = 120.0  # seconds between cycles: past min_runtime, so re-placed jobs are victims


@dataclass
class Cycle:
    places: set[str]
    preempts: dict[str, str | None]  # victim -> for_job


@dataclass
class Case:
    id: str
    start: m.Snapshot
    cycles: list[Cycle]


# Queue `g` holds nothing of its guarantee 1; queue `b` borrows the whole node and has
# a job pending for longer than `starvation_s` (600 s). Starving jobs go first in
# admission, so once `g`'s victim stops, `b`'s starving job took the freed GPU, `g`'s
# job failed again and reclaimed the next `b` job, whose GPU went to the first victim
# (starving too, it keeps its submission time), and so on: one preemption a cycle and
# `g` never placed.
STARVING_BORROWER = snapshot(
    [node("n0", 2)],
    [queue("g").guarantee(1).obj(), queue("b").guarantee(1).obj()],
    running=[
        on(job("b1", "b").submitted(0).obj(), "n0", 0, started=0.0),
        on(job("b2", "b").submitted(1).obj(), "n0", 1, started=100.0),
    ],
    pending=[job("b3", "b").submitted(2).obj(), job("g1", "g").submitted(990).obj()],
    now=1000.0,
)

# The same with a reclaimer that is itself starving and a second queue that borrows:
# the reclaimed room still goes to the queue below its guarantee.
TWO_BORROWERS = snapshot(
    [node("n0", 2), node("n1", 2)],
    [
        queue("g").guarantee(2).obj(),
        queue("b").guarantee(1).obj(),
        queue("c").guarantee(1).obj(),
    ],
    running=[
        on(job("b1", "b").submitted(0).obj(), "n0", 0, started=0.0),
        on(job("b2", "b").submitted(1).obj(), "n0", 1, started=100.0),
        on(job("c1", "c").submitted(0).obj(), "n1", 0, started=0.0),
        on(job("c2", "c").submitted(1).obj(), "n1", 1, started=200.0),
    ],
    pending=[
        job("b3", "b").submitted(2).obj(),
        job("c3", "c").submitted(2).obj(),
        job("g1", "g").submitted(3).obj(),
        job("g2", "g").submitted(995).obj(),
    ],
    now=1000.0,
)

CASES = [
    Case(
        "starving borrower does not take back the room reclaimed for a guarantee",
        STARVING_BORROWER,
        [
            Cycle(set(), {"b2": "g1"}),
            Cycle({"g1"}, {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
        ],
    ),
    Case(
        "two borrowers: each gives back one GPU once, then the cluster settles",
        TWO_BORROWERS,
        [
            Cycle(set(), {"c2": "g1", "b2": "g2"}),
            Cycle({"g1", "g2"}, {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
            Cycle(set(), {}),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_reclaim_settles(case: Case) -> None:
    snap = case.start
    seen: list[tuple[set[str], dict[str, str | None]]] = []
    for _ in case.cycles:
        result = cycle.schedule(snap)
        seen.append(
            ({p.job_id for p in result.places}, {p.job_id: p.for_job for p in result.preempts})
        )
        snap = advance(snap, result, now=snap.now + STEP)
    assert seen == [(c.places, c.preempts) for c in case.cycles]
