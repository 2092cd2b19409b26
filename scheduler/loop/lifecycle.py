"""The job life cycle as a pure function: what one live job's workers mean for its phase.

`decide(job, workers, now, facts)` returns the `Transition` to make, or None (nothing to
do, or wait and look again). It reads no store, calls no backend and no clock; what it
needs to know besides the job and its workers comes in `Facts` (gathered by
`scheduler.loop.phases`). `scheduler.loop.enact` carries a transition out, always in
the same order: the event, the phase writes (each followed by its crash point), then the
backend's stop. Cause detection here, handling there, as kopf separates them.

For a job holding a placement (Scheduled/Running) at attempt N, the workers of (job, N)
decide, in this order:
  - a cancel request -> Cancelled, workers stopped with the job's grace period;
  - none seen, launched by another replica's backend that this one cannot see (local
    processes of another host or state directory) -> nothing: they may well run, and a
    relaunch would run them twice (the loop reports the job instead);
  - some missing, none failed, the launch never completed (no `Launched` event for N)
    -> finish the launch (`launch` is idempotent; deterministic names);
  - missing after a completed launch, once `missing_grace_s` has passed, or any failed
    -> retry as a new attempt (Pending, a restart counted) while `backoffLimit` allows,
    else Failed; infrastructure failures (`WorkerStatus.retryable`, pods gone) retry
    without using up `backoffLimit`; the rest of the gang is stopped with the job's
    grace period;
  - all succeeded -> Succeeded;
  - Running past `maxRuntime` -> Failed, workers stopped with the grace period;
  - Scheduled and no worker pending -> Running.
A Preempted job (a crash between Preempted and Pending) goes back to Pending.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from scheduler.backends.base import StopReason, WorkerState, WorkerStatus
from scheduler.loop.transition import Event, Outcome, Stop, Transition, Write
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec, Phase

# After a launch completed, workers the backend does not report are only called missing
# once this long has passed (a watch cache may lag behind the launch that made them).
MISSING_GRACE_S = 30.0


class Job(Protocol):
    """What `decide` reads of a live job (`scheduler.store.live.LiveJob` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def attempt(self) -> int: ...
    @property
    def cancel_requested(self) -> bool: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def placements(self) -> Sequence[WorkerPlacement]: ...
    @property
    def resized_at(self) -> datetime | None: ...


def current(job: Job, workers: Sequence[WorkerStatus]) -> list[WorkerStatus]:
    """The workers of the job's present size: a worker an elastic job's shrink removed
    (an index past its placements) no longer decides its phase, even while it drains,
    nor once ended inside the size (`vacated`: a grow back into its index not carried
    out yet), where it is missing, not failed."""
    size = size_of(job)
    return [w for w in workers if w.worker < size and not w.vacated]


def size_of(job: Job) -> int:
    """How many workers the job has now: its placements (an elastic job's change with each
    resize), or, before its first, its spec's count (an elastic range's `min`)."""
    return len(job.placements) or job.spec.min_workers


@dataclass(frozen=True, slots=True)
class Facts:
    """What the loop knows of a job besides its row and its workers.

    `launched_at`: when the launch of the current attempt completed (its `Launched`
    event), None if it never did. `failures`: failed attempts that count against
    `backoffLimit`. `launch_held`: the job's launch backoff is still running.
    `retry_delay_s`: how long a retry would wait (the retry backoff's next delay).
    `launched_elsewhere`: the backend instance that launched the current attempt when it
    is another one whose workers this replica's backend cannot see."""

    launched_at: float | None = None
    failures: int = 0
    launch_held: bool = False
    retry_delay_s: float = 0.0
    launched_elsewhere: str | None = None


def needs_history(job: Job, workers: Sequence[WorkerStatus]) -> bool:
    """Whether `decide` may read `Facts` from the job's events: only when a worker of a
    placed attempt is missing or failed (so the loop reads events for those jobs alone);
    for a cancelled one, only when none is seen (it may be another replica's)."""
    if job.phase not in (Phase.SCHEDULED, Phase.RUNNING):
        return False
    if job.cancel_requested:
        return not workers
    workers = current(job, workers)
    present = {w.worker for w in workers}
    return len(present) < size_of(job) or any(w.state is WorkerState.FAILED for w in workers)


def decide(
    job: Job,
    workers: Sequence[WorkerStatus],
    now: float,
    facts: Facts = Facts(),
    *,
    missing_grace_s: float = MISSING_GRACE_S,
) -> Transition | None:
    """The transition `job` is due, given the workers of its current attempt."""
    if job.phase is Phase.PREEMPTED:
        return Transition(Outcome.REQUEUED, (Write(Phase.PENDING, "Requeued"),))
    if job.phase not in (Phase.SCHEDULED, Phase.RUNNING):
        return None
    grace = float(job.spec.termination_grace_period_seconds)
    if facts.launched_elsewhere is not None and not workers:
        # Another replica's workers, out of this one's sight and reach (it could not
        # adopt them): never relaunched, and, cancelled, still holding their GPUs until
        # they are seen gone, since nothing here can stop them.
        return None
    if job.cancel_requested:
        return _cancelled(grace)
    workers = current(job, workers)
    failed = [w for w in workers if w.state is WorkerState.FAILED]
    missing = sorted(set(range(size_of(job))) - {w.worker for w in workers})
    if not failed and missing:
        if facts.launched_at is None:
            # The launch never completed (a crash, a transient API error): finish it,
            # unless its backoff still runs.
            return None if facts.launch_held else Transition(Outcome.LAUNCH)
        since = facts.launched_at
        if job.resized_at is not None:  # a grow's workers may lag behind it as well
            since = max(since, job.resized_at.timestamp())
        if now - since < missing_grace_s:
            return None  # the backend's view may lag behind the launch; look again later
    if failed or missing:
        return _broken(job, failed, missing, facts)
    if all(w.state is WorkerState.SUCCEEDED for w in workers):
        message = f"all {len(workers)} workers exited 0"
        return Transition(Outcome.SUCCEEDED, (Write(Phase.SUCCEEDED, "Completed", message),))
    limit = job.spec.max_runtime
    started = job.started_at.timestamp() if job.started_at is not None else now
    if job.phase is Phase.RUNNING and limit is not None and now - started > limit:
        return _over_runtime(limit, grace)
    if job.phase is Phase.SCHEDULED and all(w.state is not WorkerState.PENDING for w in workers):
        message = f"{len(workers)} workers running"
        return Transition(Outcome.RUNNING, (Write(Phase.RUNNING, "WorkersRunning", message),))
    return None


def quiet_until(job: Job, workers: Sequence[WorkerStatus], now: float) -> float:
    """Until when `decide` returns None for this job and these workers, whatever the
    `Facts` (`now` or earlier: it may act now). The scheduler cache reconciles a job
    again only when its row or its workers changed or this time has come."""
    if job.phase is Phase.PENDING:
        return math.inf
    if job.phase not in (Phase.SCHEDULED, Phase.RUNNING) or job.cancel_requested:
        return now
    if needs_history(job, workers) or all(w.state is WorkerState.SUCCEEDED for w in workers):
        return now
    if job.phase is Phase.SCHEDULED:
        pending = any(w.state is WorkerState.PENDING for w in workers)
        return math.inf if pending else now
    limit = job.spec.max_runtime
    if limit is None or job.started_at is None:
        return math.inf
    # `decide` fails it once now - started > limit: quiet up to and including that instant.
    return max(now, job.started_at.timestamp() + limit)


def _cancelled(grace_s: float) -> Transition:
    write = Write(
        Phase.CANCELLED, "Cancelled", "stopped at the user's request", fault="cancel:recorded"
    )
    return Transition(Outcome.CANCELLED, (write,), stop=Stop(grace_s, StopReason.CANCELLED))


def _over_runtime(limit_s: float, grace_s: float) -> Transition:
    write = Write(
        Phase.FAILED,
        "MaxRuntimeExceeded",
        f"ran longer than maxRuntime {limit_s}s",
        fault="reconcile:maxruntime-recorded",
    )
    return Transition(Outcome.FAILED, (write,), stop=Stop(grace_s, StopReason.MAX_RUNTIME))


def _broken(
    job: Job, failed: Sequence[WorkerStatus], missing: Sequence[int], facts: Facts
) -> Transition:
    """A failed or incomplete gang: retry or fail; the rest of the gang is stopped with
    the job's `terminationGracePeriodSeconds` (SIGTERM, time to write a checkpoint), as a
    cancel or a preemption is."""
    if failed:
        why = f"worker {failed[0].worker}: {failed[0].message or 'failed'}"
    else:
        shown = ", ".join(str(m) for m in missing[:8])
        why = f"worker(s) {shown} gone after the launch (pods deleted or node lost)"
    stop = Stop(float(job.spec.termination_grace_period_seconds), StopReason.FAILED)
    attempt = f"attempt {job.attempt}"
    fault = "reconcile:failed-recorded"
    # The infrastructure's failure (node lost, evicted, refused at admission, pods gone)
    # retries without using up backoffLimit; the job's own counts.
    interrupted = all(f.retryable for f in failed)
    if not interrupted and facts.failures >= job.spec.backoff_limit:
        write = Write(Phase.FAILED, "WorkerFailed", f"{attempt}: {why}", fault=fault)
        return Transition(Outcome.FAILED, (write,), stop=stop)
    delay = facts.retry_delay_s
    when = f"retrying in {delay:.0f}s" if delay else "retrying"
    event = Event(
        "AttemptInterrupted" if interrupted else "AttemptFailed",
        "Interrupted" if interrupted else "WorkerFailed",
        f"{attempt}: {why}",
    )
    write = Write(
        Phase.PENDING,
        "InfrastructureRetry" if interrupted else "BackoffRetry",
        f"{attempt} failed ({why}); {when}",
        count_restart=True,
        fault=fault,
    )
    return Transition(
        Outcome.RETRIED,
        (write,),
        event=event,
        stop=stop,
        hold_launch=interrupted,
        hold_retry=True,
    )
