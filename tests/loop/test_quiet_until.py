"""`lifecycle.quiet_until`, the promise the scheduler cache skips jobs on: for any job,
workers and facts, `decide` returns None at every instant before the time it gives.
A property test over generated jobs, workers, times and facts, plus the rows that matter."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.backends.base import WorkerState
from scheduler.loop import lifecycle
from scheduler.loop.lifecycle import Facts
from scheduler.spec import Phase

from .test_decide import T0, job, ws

P, R, S, F = (WorkerState.PENDING, WorkerState.RUNNING, WorkerState.SUCCEEDED, WorkerState.FAILED)

facts = st.builds(
    Facts,
    launched_at=st.none() | st.floats(T0 - 100, T0 + 100),
    failures=st.integers(0, 3),
    launch_held=st.booleans(),
    retry_delay_s=st.floats(0, 300),
    launched_elsewhere=st.none() | st.just("other"),
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[lifecycle.Job, list, float]:
    n = draw(st.integers(1, 3))
    the_job = job(
        draw(st.sampled_from([Phase.RUNNING] * 4 + [Phase.SCHEDULED] * 2 + list(Phase))),
        workers=n,
        max_runtime=draw(st.none() | st.integers(1, 200)),
        cancel=draw(st.sampled_from([False] * 4 + [True])),
        started=draw(st.none() | st.floats(T0 - 300, T0)),
    )
    states = draw(st.lists(st.sampled_from([P, R, S, F]), min_size=n, max_size=n))
    skip = tuple(draw(st.just(set()) | st.sets(st.integers(0, n - 1), max_size=n)))
    return the_job, ws(*states, skip=skip), draw(st.floats(T0, T0 + 300))


@settings(max_examples=400, deadline=None)
@given(cases(), facts, st.floats(0, 1))
def test_decide_does_nothing_before_the_quiet_time(case, known: Facts, part: float) -> None:
    the_job, workers, now = case
    until = lifecycle.quiet_until(the_job, workers, now)
    assert until >= now
    if until == now:
        return
    later = now + part * (min(until, now + 1e6) - now)  # any instant in [now, until)
    last = math.nextafter(until, -math.inf) if until < math.inf else now + 1e9
    for t in (now, later, last):
        if t < until:
            got = lifecycle.decide(the_job, workers, t, known)
            assert got is None, (the_job, workers, t, until, got)


def test_the_cases_that_are_quiet_and_until_when() -> None:
    running = job(Phase.RUNNING, max_runtime=100, started=T0)
    rows = [
        (job(Phase.PENDING), [], math.inf),
        (job(Phase.RUNNING, started=T0), ws(R, R), math.inf),
        (running, ws(R, R), T0 + 100),  # maxRuntime: Failed once past it
        (job(Phase.SCHEDULED), ws(P, R), math.inf),  # Running once none is pending
        (job(Phase.SCHEDULED), ws(R, R), T0),  # due now: -> Running
        (job(Phase.RUNNING), ws(R, F), T0),  # a failed worker: due now
        (job(Phase.RUNNING), ws(R, R, skip=(1,)), T0),  # a missing worker: facts decide
        (job(Phase.RUNNING), ws(S, S), T0),  # all succeeded: due now
        (job(Phase.RUNNING, cancel=True), ws(R, R), T0),
        (job(Phase.PREEMPTED), [], T0),
    ]
    for the_job, workers, expected in rows:
        assert lifecycle.quiet_until(the_job, workers, T0) == expected, (the_job, workers)
