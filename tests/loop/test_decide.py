"""The job life cycle, table-tested: `lifecycle.decide` for one job and its workers.

Each row is (name, job, workers, now, facts, expected): expected is None (nothing to do
yet) or (outcome, [(phase, reason), ...] written in order, stop reason or None)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from scheduler.backends.base import StopReason, WorkerState, WorkerStatus
from scheduler.loop import lifecycle, transition
from scheduler.loop.lifecycle import Facts
from scheduler.loop.transition import Outcome
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec, Phase

P, R, S, F = (WorkerState.PENDING, WorkerState.RUNNING, WorkerState.SUCCEEDED, WorkerState.FAILED)
T0 = 1_000.0


@dataclass(frozen=True)
class Job:
    id: str
    phase: Phase
    spec: JobSpec
    attempt: int = 1
    cancel_requested: bool = False
    started_at: datetime | None = None
    placements: tuple[WorkerPlacement, ...] = ()  # none: the spec's count
    resized_at: datetime | None = None


def job(
    phase: Phase = Phase.RUNNING,
    *,
    workers: int = 2,
    backoff_limit: int = 1,
    max_runtime: int | None = None,
    cancel: bool = False,
    started: float | None = T0,
) -> Job:
    spec = JobSpec(
        name="j",
        queue="q",
        image="x",
        workers=workers,
        gpu=1,
        backoff_limit=backoff_limit,
        max_runtime=max_runtime,
        termination_grace_period_seconds=7,
    )
    at = datetime.fromtimestamp(started, UTC) if started is not None else None
    return Job("j", phase, spec, cancel_requested=cancel, started_at=at)


def ws(
    *states: WorkerState, retryable: bool = False, skip: tuple[int, ...] = ()
) -> list[WorkerStatus]:
    return [
        WorkerStatus("j", 1, i, s, message="exit 3" if s is F else "", retryable=retryable)
        for i, s in enumerate(states)
        if i not in skip
    ]


LAUNCHED = Facts(launched_at=T0)
Expected = tuple[Outcome, list[tuple[Phase, str]], StopReason | None] | None

TABLE: list[tuple[str, Job, list[WorkerStatus], float, Facts, Expected]] = [
    ("pending: not the reconciler's", job(Phase.PENDING), [], T0, Facts(), None),
    ("finished: nothing", job(Phase.SUCCEEDED), [], T0, Facts(), None),
    (
        "preempted (crash before requeue) -> pending",
        job(Phase.PREEMPTED),
        [],
        T0,
        Facts(),
        (Outcome.REQUEUED, [(Phase.PENDING, "Requeued")], None),
    ),
    (
        "cancel wins over everything",
        job(cancel=True),
        ws(F, F),
        T0,
        Facts(),
        (Outcome.CANCELLED, [(Phase.CANCELLED, "Cancelled")], StopReason.CANCELLED),
    ),
    (
        "no workers, never launched -> finish the launch",
        job(Phase.SCHEDULED),
        [],
        T0,
        Facts(),
        (Outcome.LAUNCH, [], None),
    ),
    (
        "half a gang, never launched -> finish the launch",
        job(Phase.SCHEDULED),
        ws(R, R, skip=(1,)),
        T0,
        Facts(),
        (Outcome.LAUNCH, [], None),
    ),
    (
        "never launched, backoff running -> wait",
        job(Phase.SCHEDULED),
        [],
        T0,
        Facts(launch_held=True),
        None,
    ),
    (
        "missing inside the grace after the launch -> wait",
        job(),
        ws(R, R, skip=(0,)),
        T0 + 29,
        LAUNCHED,
        None,
    ),
    (
        "missing past the grace -> retry, infrastructure",
        job(),
        ws(R, R, skip=(0,)),
        T0 + 31,
        LAUNCHED,
        (Outcome.RETRIED, [(Phase.PENDING, "InfrastructureRetry")], StopReason.FAILED),
    ),
    (
        "a worker failed, retries left -> retry",
        job(backoff_limit=1),
        ws(R, F),
        T0,
        LAUNCHED,
        (Outcome.RETRIED, [(Phase.PENDING, "BackoffRetry")], StopReason.FAILED),
    ),
    (
        "a worker failed, backoffLimit used up -> failed",
        job(backoff_limit=1),
        ws(R, F),
        T0,
        Facts(launched_at=T0, failures=1),
        (Outcome.FAILED, [(Phase.FAILED, "WorkerFailed")], StopReason.FAILED),
    ),
    (
        "infrastructure failure ignores backoffLimit",
        job(backoff_limit=0),
        ws(F, F, retryable=True),
        T0,
        Facts(launched_at=T0, failures=5),
        (Outcome.RETRIED, [(Phase.PENDING, "InfrastructureRetry")], StopReason.FAILED),
    ),
    (
        "failed beats missing",
        job(backoff_limit=0),
        ws(F, R, skip=(1,)),
        T0,
        Facts(),
        (Outcome.FAILED, [(Phase.FAILED, "WorkerFailed")], StopReason.FAILED),
    ),
    (
        "all succeeded",
        job(),
        ws(S, S),
        T0,
        Facts(),
        (Outcome.SUCCEEDED, [(Phase.SUCCEEDED, "Completed")], None),
    ),
    (
        "succeeded while over maxRuntime is still success",
        job(max_runtime=10),
        ws(S, S),
        T0 + 100,
        Facts(),
        (Outcome.SUCCEEDED, [(Phase.SUCCEEDED, "Completed")], None),
    ),
    (
        "running past maxRuntime -> failed",
        job(max_runtime=10),
        ws(R, R),
        T0 + 11,
        Facts(),
        (Outcome.FAILED, [(Phase.FAILED, "MaxRuntimeExceeded")], StopReason.MAX_RUNTIME),
    ),
    ("running within maxRuntime", job(max_runtime=10), ws(R, R), T0 + 9, Facts(), None),
    (
        "scheduled, not started, maxRuntime does not apply",
        job(Phase.SCHEDULED, max_runtime=10, started=None),
        ws(P, R),
        T0 + 100,
        Facts(),
        None,
    ),
    (
        "scheduled, all up -> running",
        job(Phase.SCHEDULED),
        ws(R, S),
        T0,
        Facts(),
        (Outcome.RUNNING, [(Phase.RUNNING, "WorkersRunning")], None),
    ),
    ("scheduled, one still pending", job(Phase.SCHEDULED), ws(R, P), T0, Facts(), None),
    ("running, nothing new", job(), ws(R, S), T0, Facts(), None),
]


@pytest.mark.parametrize(
    ("name", "j", "workers", "now", "facts", "expected"), TABLE, ids=[row[0] for row in TABLE]
)
def test_decide(
    name: str, j: Job, workers: list[WorkerStatus], now: float, facts: Facts, expected: Expected
) -> None:
    t = lifecycle.decide(j, workers, now, facts)
    if expected is None:
        assert t is None
        return
    assert t is not None
    outcome, writes, stop = expected
    assert t.outcome is outcome
    assert [(w.phase, w.reason) for w in t.writes] == writes
    assert (t.stop.reason if t.stop else None) == stop


def test_retry_message_names_worker_and_delay_and_holds() -> None:
    t = lifecycle.decide(job(), ws(R, F), T0, Facts(launched_at=T0, retry_delay_s=8.0))
    assert t is not None and t.event is not None
    assert t.event.kind == "AttemptFailed"
    assert t.event.message == "attempt 1: worker 1: exit 3"
    assert t.writes[0].message == "attempt 1 failed (worker 1: exit 3); retrying in 8s"
    assert t.writes[0].count_restart
    assert t.hold_retry and not t.hold_launch  # only the infrastructure's failure holds launch
    # The rest of a broken gang gets the job's grace period (issue 24 item 8), not 1 s.
    assert t.stop is not None and t.stop.grace_s == 7.0


def test_interrupted_retry_holds_the_launch() -> None:
    t = lifecycle.decide(job(), ws(R, F, retryable=True), T0, LAUNCHED)
    assert t is not None and t.event is not None
    assert t.event.kind == "AttemptInterrupted"
    assert t.hold_launch and t.writes[0].message.endswith("; retrying")


def test_cancel_and_max_runtime_keep_the_grace_period() -> None:
    for t in (
        lifecycle.decide(job(cancel=True), ws(R, R), T0),
        lifecycle.decide(job(max_runtime=1), ws(R, R), T0 + 5),
    ):
        assert t is not None and t.stop is not None and t.stop.grace_s == 7.0


def test_preempt_is_two_writes_then_the_stop() -> None:
    t = transition.preempt(12.0, "reclaimed by b")
    assert [(w.phase, w.reason, w.fault) for w in t.writes] == [
        (Phase.PREEMPTED, "Preempted", "preempt:recorded"),
        (Phase.PENDING, "Requeued", "preempt:requeued"),
    ]
    assert t.writes[0].count_restart and not t.writes[1].count_restart
    assert t.stop == transition.Stop(12.0, StopReason.PREEMPTED, "preempt:stopped")


@pytest.mark.parametrize(
    ("j", "workers", "needed"),
    [
        (job(), ws(R, R), False),
        (job(), ws(R, R, skip=(1,)), True),
        (job(), ws(R, F), True),
        (job(cancel=True), ws(R, F), False),
        (job(Phase.PENDING), [], False),
    ],
)
def test_history_is_read_only_when_a_worker_is_missing_or_failed(
    j: Job, workers: list[WorkerStatus], needed: bool
) -> None:
    assert lifecycle.needs_history(j, workers) is needed
