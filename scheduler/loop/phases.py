"""Step 3 of a cycle (reconcile): bring each live job's phase in line with what its
workers do.

`job` gathers what the pure `scheduler.loop.lifecycle.decide` needs (the workers of the
job's current attempt, its `Launched` event and counted failures, its backoffs), asks it
for the transition; `flush` then has `scheduler.loop.enact` carry out every job's
together: store first, backend second. A crash in between leaves workers whose job no
longer holds them, and `orphans` stops those on the next cycle. The one transition with
no phase change, finishing a launch that never completed, goes through
`launching.launch` (idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from scheduler.backends import base
from scheduler.loop import faults, launching, lifecycle, resize
from scheduler.loop.context import Cycle
from scheduler.loop.enact import enact, stop_quietly, taken
from scheduler.loop.lifecycle import MISSING_GRACE_S
from scheduler.loop.transition import Outcome, Transition
from scheduler.spec import Phase
from scheduler.store import errors
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)

AttemptKey = tuple[str, int]
__all__ = ["MISSING_GRACE_S", "AttemptKey", "Reconciled", "by_attempt", "job", "orphans"]


@dataclass
class Reconciled:
    """What reconciliation did, for the cycle report and the simulator's metrics."""

    launched: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    orphans_stopped: list[AttemptKey] = field(default_factory=list)
    # Jobs whose workers another replica's backend launched, out of this one's sight
    # (job id -> that backend's instance): left alone, never relaunched.
    elsewhere: dict[str, str] = field(default_factory=dict)
    touched: int = 0  # store writes of any kind (the loop re-reads jobs when > 0)
    # The transitions decided, carried out together by `flush`.
    deferred: list[tuple[LiveJob, Transition]] = field(default_factory=list)

    def record(self, outcome: Outcome, job_id: str) -> None:
        lists = {
            Outcome.RUNNING: self.running,
            Outcome.SUCCEEDED: self.succeeded,
            Outcome.FAILED: self.failed,
            Outcome.RETRIED: self.retried,
            Outcome.CANCELLED: self.cancelled,
        }
        if outcome in lists:
            lists[outcome].append(job_id)

    def _moved(self) -> tuple[list[str], ...]:
        """The lists whose entries each moved a job on in the store or the cluster."""
        return (self.launched, self.running, self.succeeded, self.failed, self.retried,
                self.cancelled)  # fmt: skip

    def size(self) -> int:
        """How much was done so far (grows with every write, launch or stop)."""
        n = len(self.orphans_stopped) + len(self.elsewhere) + len(self.deferred)
        return self.touched + n + sum(len(x) for x in self._moved())

    def changed(self) -> bool:
        return self.touched > 0 or any(self._moved())


def by_attempt(
    statuses: Sequence[base.WorkerStatus],
) -> dict[AttemptKey, list[base.WorkerStatus]]:
    out: dict[AttemptKey, list[base.WorkerStatus]] = {}
    for s in statuses:
        out.setdefault((s.job_id, s.attempt), []).append(s)
    return out


def facts(cycle: Cycle, lj: LiveJob, workers: Sequence[base.WorkerStatus]) -> lifecycle.Facts:
    """What `lifecycle.decide` needs beyond the job and its workers. Events are read
    only for a job with a missing or failed worker (one read for both facts)."""
    launched_at, failures, elsewhere = None, 0, None
    if lifecycle.needs_history(lj, workers):
        events = cycle.db.list_events(job_id=lj.id)
        launched_at = launching.launched_at(cycle.db, lj.id, lj.attempt, events=events)
        # Failed attempts that count against `backoffLimit` (infrastructure ones do
        # not: they are recorded as `AttemptInterrupted`).
        failures = sum(1 for e in events if e.kind == "AttemptFailed")
        local = cycle.backend.capabilities().local_workers
        if local is not None:
            by = launching.launched_by(events, lj.attempt)
            if by is not None and by != local.instance:
                elsewhere = by
    memory = cycle.memory
    return lifecycle.Facts(
        launched_at=launched_at,
        failures=failures,
        launch_held=memory.launches.active(lj.id, cycle.now),
        retry_delay_s=memory.retries.peek(lj.id),
        launched_elsewhere=elsewhere,
    )


def job(
    cycle: Cycle,
    lj: LiveJob,
    workers: Sequence[base.WorkerStatus],
    done: Reconciled,
    *,
    missing_grace_s: float = MISSING_GRACE_S,
) -> None:
    """Reconcile one live job: `lifecycle.decide`, its transition kept for `flush`; a
    version conflict just leaves it for the next cycle."""
    now = cycle.now
    try:
        known = facts(cycle, lj, workers)
        if known.launched_elsewhere is not None and not workers:
            if _adopt(cycle, lj, known.launched_elsewhere):
                done.touched += 1  # its workers are this replica's from the next cycle on
                return
            done.elsewhere[lj.id] = known.launched_elsewhere
        if lj.request.elastic:
            resize.settle(cycle, lj, workers)
        t = lifecycle.decide(lj, workers, now, known, missing_grace_s=missing_grace_s)
        if t is None:
            return
        if t.outcome is Outcome.LAUNCH:
            _finish_launch(cycle, lj, done)
            return
        done.deferred.append((lj, t))
    except errors.MOVED_ON as exc:
        done.touched += 1
        log.info("job %s changed meanwhile (%s); next cycle", lj.id, exc)


def flush(cycle: Cycle, done: Reconciled) -> list[LiveJob]:
    """Carry out the transitions `job` decided, together (`enact`: one transaction per
    step); a job that moved on meanwhile is decided again next cycle. The memory's
    `retries` space a failed job's next attempts out exponentially (the loop leaves the
    job out of the pending set until its delay is over). Returns the jobs as written:
    the loop's cache takes them over instead of reading them back."""
    deferred, done.deferred = done.deferred, []
    memory = cycle.memory
    results = enact(cycle.db, cycle.backend, deferred, now=cycle.now,
                    backoff=memory.launches, retries=memory.retries)  # fmt: skip
    out = []
    for (lj, t), result in zip(deferred, results, strict=True):
        if (job := taken(result, lj.id, "reconcile", cycle.on_error)) is None:
            done.touched += 1  # read it again
            continue
        done.record(t.outcome, lj.id)
        out.append(job)
    return out


def _adopt(cycle: Cycle, lj: LiveJob, by: str) -> bool:
    """Take over the attempt a replica that is gone launched on this host (its state
    directory is in the launch's event); False where it cannot be read from here."""
    local = cycle.backend.capabilities().local_workers
    if local is None:
        return False
    state = launching.launched_state(cycle.db.list_events(job_id=lj.id), lj.attempt)
    if state is None or not local.adopt(state, by, lj.id, lj.attempt):
        return False
    log.info("job %s: adopted attempt %d from replica %s (%s)", lj.id, lj.attempt, by, state)
    return True


def _finish_launch(cycle: Cycle, lj: LiveJob, done: Reconciled) -> None:
    """The launch never completed (a crash, a transient API error): finish it; names are
    deterministic, so what exists is found, not made twice."""
    if launching.launch(cycle, lj, lj.placements):
        done.launched.append(lj.id)
    else:
        done.touched += 1
    faults.point("reconcile:relaunched")


def orphans(
    backend: base.ClusterBackend,
    live: Mapping[str, LiveJob],
    attempts: Mapping[AttemptKey, Sequence[base.WorkerStatus]],
    done: Reconciled,
    db: LiveStore | None = None,
    *,
    keep: Set[str] = frozenset(),
) -> list[AttemptKey]:
    """Stop every live worker whose job does not hold it; returns those still alive
    (stopping: their GPUs stay reserved in the snapshot until the processes are gone).
    A job that has ended (cancelled, past maxRuntime: not live) is looked up in the
    store through `db`, so a stop repeated or first made here (after a crash) keeps
    the job's own grace period and reason rather than killing at once. The workers of
    the jobs in `keep` (live, but their rows cannot be read) are left running and
    returned with the others, so their GPUs stay reserved."""
    draining = []
    for (job_id, attempt), workers in attempts.items():
        if not any(
            w.state in (base.WorkerState.RUNNING, base.WorkerState.PENDING) or w.still_running
            for w in workers
        ):
            continue
        if job_id in keep:
            draining.append((job_id, attempt))
            continue
        lj = live.get(job_id)
        if (
            lj is not None
            and lj.phase in (Phase.SCHEDULED, Phase.RUNNING)
            and lj.attempt == attempt
        ):
            continue
        grace, reason = _stop_terms(db, job_id, lj)
        # Idempotent: a repeat keeps the first stop's deadline and reason.
        stop_quietly(backend, job_id, grace, reason=reason)
        done.orphans_stopped.append((job_id, attempt))
        draining.append((job_id, attempt))
    return draining


def _stop_terms(
    db: LiveStore | None, job_id: str, lj: LiveJob | None
) -> tuple[float, base.StopReason]:
    """The grace period and reason of an orphan's stop, from its job when known."""
    if lj is not None:
        return float(lj.spec.termination_grace_period_seconds), base.StopReason.STOPPED
    if db is None:
        return 0.0, base.StopReason.STOPPED
    try:
        end = db.ended(job_id=job_id)
    except (errors.NotFound, TypeError, ValueError):
        return 0.0, base.StopReason.STOPPED
    if end.phase is Phase.CANCELLED:
        return end.grace_s, base.StopReason.CANCELLED
    if end.reason == "MaxRuntimeExceeded":
        return end.grace_s, base.StopReason.MAX_RUNTIME
    return end.grace_s, base.StopReason.STOPPED
