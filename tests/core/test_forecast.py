"""The start-time forecast (issue 29): table-driven cases on one 8-GPU node, the
runtime model, and properties over random clusters and job mixes."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import advance, job, nodes, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle
from scheduler.core.forecast import Estimate, RuntimeModel, forecast

from . import strategies

NOW = 1000.0


def unknown(job: m.JobRequest, elapsed: float) -> tuple[float | None, str]:
    return None, "no history"


def fixed(seconds: float) -> object:
    return lambda job, elapsed: (seconds, f"{seconds:g} s from history")


def one_node(running: list[m.RunningJob], pending: list[m.JobRequest]) -> m.Snapshot:
    return snapshot(nodes(1), [queue("q").obj(), queue("b").obj()], running, pending, NOW)


BUSY = job("r", "q").gpu(8).runtime(100).obj()  # holds the whole node until NOW + 100
CASES = {
    # name: (running, pending, runtime, {job: expected start}, {job: words in basis/unknown})
    "fits now": ([], [job("p", "q").gpu(4).obj()], unknown, {"p": NOW}, {"p": "fits now"}),
    "behind maxRuntime 100": (
        [on(BUSY, "n0", started=NOW)],
        [job("p", "q").gpu(8).obj()],
        unknown,
        {"p": NOW + 100},
        {"p": "r ends at +100 s (maxRuntime)"},
    ),
    "maxRuntime counts from the start": (
        [on(BUSY, "n0", started=NOW - 60)],
        [job("p", "q").gpu(2).obj()],
        unknown,
        {"p": NOW + 40},
        {"p": "maxRuntime"},
    ),
    "behind an estimated runtime": (
        [on(job("r", "q").gpu(8).obj(), "n0", started=NOW - 100)],
        [job("p", "q").gpu(8).obj()],
        fixed(300),
        {"p": NOW + 200},
        {"p": "300 s from history"},
    ),
    "a queue of two, one after the other": (
        [on(BUSY, "n0", started=NOW)],
        [
            job("p1", "q").gpu(8).runtime(50).submitted(1).obj(),
            job("p2", "q").gpu(8).runtime(50).submitted(2).obj(),
        ],
        unknown,
        {"p1": NOW + 100, "p2": NOW + 150},
        {"p2": "p1 ends at +150 s"},
    ),
    "behind a job with no known runtime": (
        [on(job("r", "q").gpu(8).obj(), "n0", started=NOW)],
        [job("p", "q").gpu(1).obj()],
        unknown,
        {"p": None},
        {"p": "no known runtime (r: no history)"},
    ),
    "beside a job with no known runtime": (
        [
            on(job("u", "q").gpu(4).obj(), "n0", started=NOW),
            on(job("r", "q").gpu(4).runtime(100).obj(), "n0", first_gpu=4, started=NOW),
        ],
        [job("p", "q").gpu(4).obj()],
        unknown,
        {"p": NOW + 100},
        {"p": "assumes 1 jobs with no known runtime keep running"},
    ),
    "beyond the horizon": (
        [on(job("r", "q").gpu(8).runtime(30 * 86400).obj(), "n0", started=NOW)],
        [job("p", "q").gpu(8).obj()],
        unknown,
        {"p": None},
        {"p": "168 h horizon"},
    ),
    "an unknown queue": ([], [job("p", "nope").obj()], unknown, {"p": None}, {"p": "UnknownQueue"}),
    "a GPU type the cluster lacks": (
        [],
        [job("p", "q").types("B200").obj()],
        unknown,
        {"p": None},
        {"p": "GpuType"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cases(name: str) -> None:
    running, pending, runtime, starts, words = CASES[name]
    got = forecast(one_node(running, pending), runtime)  # type: ignore[arg-type]
    assert {j: e.start_s for j, e in got.items()} == starts
    for j, said in words.items():
        assert said in got[j].basis + got[j].unknown, got[j]


def test_reclaim_waits_for_the_victims_grace() -> None:
    # "b" borrows the whole node; "g" is owed 8 GPUs and takes them back by preemption.
    borrower = job("v", "b").gpu(8).obj()
    snap = snapshot(
        nodes(1),
        [queue("g").guarantee(8).obj(), queue("b").obj()],
        [on(borrower, "n0", started=0.0)],
        [job("p", "g").gpu(8).obj()],
        NOW,
    )
    got = forecast(snap, unknown)
    assert got["p"].start_s == NOW + borrower.grace_period_s
    assert "v ends" in got["p"].basis and "preempted" in got["p"].basis
    assert set(got) == {"p"}  # the victim pends again, but was not asked about


def test_a_shrink_frees_room_after_the_removed_workers_grace() -> None:
    # "b"'s elastic job holds the node at 8 workers (its gang 2); "g" is owed 4 GPUs and
    # gets them by a shrink to 4: it starts once the 4 removed workers have drained.
    el = job("el", "b").workers(2).elastic(8).obj()
    grown = dataclasses.replace(
        on(el, "n0"), placements=tuple(m.WorkerPlacement(w, "n0", (w,)) for w in range(8))
    )
    snap = snapshot(
        nodes(1),
        [queue("g").guarantee(4).obj(), queue("b").obj()],
        [grown],
        [job("p", "g").workers(4).obj()],
        NOW,
    )
    got = forecast(snap, unknown)
    assert got["p"].start_s == NOW + el.grace_period_s
    assert "shrunk" in got["p"].basis
    assert set(got) == {"p"}  # the elastic job runs on at 4: it does not wait again


def test_a_draining_earlier_attempt_does_not_wait_again() -> None:
    # "j" runs again (attempt 1) while attempt 0 drains on the other 4 GPUs: once drained,
    # "p" gets them; "j" does not go back to pending ahead of it.
    j = job("j", "q").gpu(4).runtime(1000).submitted(0).obj()
    old = dataclasses.replace(on(j, "n0", started=0.0, stopping=True), attempt=0)
    new = dataclasses.replace(on(j, "n0", first_gpu=4, started=NOW), attempt=1)
    got = forecast(one_node([old, new], [job("p", "q").gpu(4).submitted(5).obj()]), unknown)
    assert got["p"].start_s == NOW + j.grace_period_s
    assert "stopping (grace period)" in got["p"].basis


def test_max_steps_bounds_the_replay() -> None:
    running = [on(BUSY, "n0", started=NOW)]
    pending = [job(f"p{i}", "q").gpu(8).runtime(10).submitted(i).obj() for i in range(5)]
    full = [NOW + 100, NOW + 110, NOW + 120, NOW + 130, NOW + 140]
    assert [e.start_s for e in forecast(one_node(running, pending), unknown).values()] == full
    got = [e for e in forecast(one_node(running, pending), unknown, max_steps=3).values()]
    # Time rules (backfill deadlines) take steps too: fewer than three jobs get a start.
    known = [e.start_s for e in got if e.start_s is not None]
    assert 1 <= len(known) < 3 and known == full[: len(known)]
    assert all("stopped after 3 cycles" in e.unknown for e in got[len(known) :])


def test_positions_follow_the_cycle_order() -> None:
    pending = [
        job("late", "q").submitted(20).obj(),
        job("urgent", "q").priority(5).submitted(30).obj(),
        job("other", "b").submitted(5).obj(),
    ]
    got = forecast(one_node([on(BUSY, "n0", started=NOW)], pending), unknown)
    assert {j: e.position for j, e in got.items()} == {"urgent": 1, "late": 2, "other": 1}


def test_runtime_model_by_shape_then_queue() -> None:
    model = RuntimeModel(
        [("q", 8.0, 1, 100.0), ("q", 8.0, 1, 300.0), ("q", 8.0, 1, 200.0), ("q", 1.0, 2, 50.0)]
    )
    assert model(job("a", "q").gpu(8).obj()) == (
        200.0,
        "median of 3 finished jobs of queue q with 8 GPUs",
    )
    assert model(job("a", "q").gpu(8).obj(), 150.0) == (
        250.0,
        "median of the 2 of 3 finished jobs of queue q with 8 GPUs "
        "that ran longer than its 150 s so far",
    )
    assert model(job("a", "q").gpu(0.5).obj()) == (
        150.0,
        "median of 4 finished jobs of queue q (any shape)",
    )
    assert model(job("a", "q").gpu(8).obj(), 400.0)[0] is None
    assert model(job("a", "other").obj()) == (
        None,
        "no finished job of queue other to estimate its runtime from",
    )


# -- properties ---------------------------------------------------------------------


@st.composite
def busy_snapshots(draw: st.DrawFn) -> tuple[m.Snapshot, dict[str, float | None]]:
    """A cluster filled by one cycle at t=0, a second wave pending at t=1000, and a
    runtime for each job (None: unknown)."""
    queues = draw(strategies.queue_sets())
    names = [q.name for q in queues if q.name != "dept"]
    first = draw(strategies.jobs(names, "w", draw(st.integers(1, 10))))
    snap = m.Snapshot(tuple(draw(strategies.clusters())), tuple(queues), pending=tuple(first))
    snap = advance(snap, cycle.schedule(snap), now=0.0)
    second = draw(strategies.jobs(names, "x", draw(st.integers(1, 8))))
    snap = dataclasses.replace(snap, pending=snap.pending + tuple(second), now=NOW)
    ids = [r.job.id for r in snap.running] + [j.id for j in snap.pending]
    known = st.sampled_from([None, 500.0, 2_000.0, 20_000.0])
    return snap, {i: draw(known) for i in ids}


@settings(max_examples=40, deadline=None)
@given(busy_snapshots())
def test_forecast_properties(case: tuple[m.Snapshot, dict[str, float | None]]) -> None:
    snap, runtimes = case
    before = copy.deepcopy(snap)
    got = forecast(snap, lambda j, elapsed: (runtimes[j.id], "drawn"), max_steps=200)
    assert snap == before, "the forecast never changes the snapshot"
    assert set(got) == {j.id for j in snap.pending}
    placed_now = {p.job_id for p in cycle.schedule(snap).places}
    for job_id, e in got.items():
        assert isinstance(e, Estimate)
        assert (e.start_s is None) == bool(e.unknown), e
        assert e.start_s is None or e.start_s >= snap.now
        assert job_id not in placed_now or e.start_s == snap.now, e
    known = {q.name for q in snap.queues}
    for name in known:
        spots = sorted(e.position for j, e in got.items() if _queue(snap, j) == name)
        assert spots == list(range(1, len(spots) + 1))


def _queue(snap: m.Snapshot, job_id: str) -> str:
    return next(j.queue for j in snap.pending if j.id == job_id)
