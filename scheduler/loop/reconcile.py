"""Step 1 of a cycle: bring each live job's phase in line with what its workers do.

For a job holding a placement (Scheduled/Running) at attempt N, the backend's workers of
(job, N) decide: none known -> launch again (the previous process crashed between
recording the placement and launching; `launch` is idempotent); all running ->
Running; all succeeded -> Succeeded; any failed -> retry as a new attempt while
`backoffLimit` allows, else Failed. Running past `maxRuntime` -> Failed. A cancel
request -> Cancelled. Store first, backend second: a crash in between leaves workers
whose job no longer holds them, and `orphans` stops those on the next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from scheduler.backends import base
from scheduler.loop import faults
from scheduler.loop.clock import as_datetime
from scheduler.spec import Phase
from scheduler.store import cycle as store
from scheduler.store import errors, jobs

log = logging.getLogger(__name__)

AttemptKey = tuple[str, int]


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
    touched: int = 0  # store writes of any kind (the loop re-reads jobs when > 0)

    def changed(self) -> bool:
        lists = (self.launched, self.running, self.succeeded, self.failed, self.retried)
        return self.touched > 0 or any(lists) or bool(self.cancelled)


def by_attempt(
    statuses: Sequence[base.WorkerStatus],
) -> dict[AttemptKey, list[base.WorkerStatus]]:
    out: dict[AttemptKey, list[base.WorkerStatus]] = {}
    for s in statuses:
        out.setdefault((s.job_id, s.attempt), []).append(s)
    return out


def _failures(session: Session, job_id: str) -> int:
    return sum(
        1 for e in jobs.list_events(session=session, job_id=job_id) if e.kind == "AttemptFailed"
    )


def job(
    session: Session,
    backend: base.ClusterBackend,
    lj: store.LiveJob,
    workers: Sequence[base.WorkerStatus],
    *,
    now: float,
    extra_env: Mapping[str, str],
    done: Reconciled,
) -> None:
    """Reconcile one live job; a version conflict just leaves it for the next cycle."""
    at = as_datetime(now)
    try:
        if lj.phase is Phase.PREEMPTED:  # a crash between Preempted and Pending
            done.touched += 1
            store.set_phase(
                session=session,
                job_id=lj.id,
                expected_version=lj.version,
                phase=Phase.PENDING,
                reason="Requeued",
                now=at,
            )
            return
        if lj.phase not in (Phase.SCHEDULED, Phase.RUNNING):
            return
        grace = float(lj.spec.termination_grace_period_seconds)
        if lj.cancel_requested:
            store.set_phase(
                session=session,
                job_id=lj.id,
                expected_version=lj.version,
                phase=Phase.CANCELLED,
                reason="Cancelled",
                message="stopped at the user's request",
                now=at,
            )
            faults.point("cancel:recorded")
            backend.stop(lj.id, grace)
            done.cancelled.append(lj.id)
            return
        if not workers:
            backend.launch(
                base.LaunchRequest(lj.id, lj.spec, lj.attempt, lj.placements, dict(extra_env))
            )
            faults.point("reconcile:relaunched")
            done.launched.append(lj.id)
            return
        states = [w.state for w in workers]
        failed = [w for w in workers if w.state is base.WorkerState.FAILED]
        if failed or len(workers) < lj.spec.workers:
            w = failed[0] if failed else None
            why = f"worker {w.worker}: {w.message or 'failed'}" if w else "workers missing"
            if _failures(session, lj.id) < lj.spec.backoff_limit:
                store.append_event(
                    session=session,
                    job_id=lj.id,
                    kind="AttemptFailed",
                    reason="WorkerFailed",
                    message=f"attempt {lj.attempt}: {why}",
                    now=at,
                )
                store.set_phase(
                    session=session,
                    job_id=lj.id,
                    expected_version=lj.version,
                    phase=Phase.PENDING,
                    reason="BackoffRetry",
                    message=f"attempt {lj.attempt} failed ({why}); retrying",
                    count_restart=True,
                    now=at,
                )
                done.retried.append(lj.id)
            else:
                store.set_phase(
                    session=session,
                    job_id=lj.id,
                    expected_version=lj.version,
                    phase=Phase.FAILED,
                    reason="WorkerFailed",
                    message=f"attempt {lj.attempt}: {why}",
                    now=at,
                )
                done.failed.append(lj.id)
            faults.point("reconcile:failed-recorded")
            backend.stop(lj.id, 0.0)  # the rest of a broken gang is of no use
            return
        if all(s is base.WorkerState.SUCCEEDED for s in states):
            store.set_phase(
                session=session,
                job_id=lj.id,
                expected_version=lj.version,
                phase=Phase.SUCCEEDED,
                reason="Completed",
                message=f"all {len(workers)} workers exited 0",
                now=at,
            )
            done.succeeded.append(lj.id)
            return
        limit = lj.spec.max_runtime
        started = lj.started_at.timestamp() if lj.started_at is not None else now
        if lj.phase is Phase.RUNNING and limit is not None and now - started > limit:
            store.set_phase(
                session=session,
                job_id=lj.id,
                expected_version=lj.version,
                phase=Phase.FAILED,
                reason="MaxRuntimeExceeded",
                message=f"ran longer than maxRuntime {limit}s",
                now=at,
            )
            faults.point("reconcile:maxruntime-recorded")
            backend.stop(lj.id, grace)
            done.failed.append(lj.id)
            return
        if lj.phase is Phase.SCHEDULED and all(s is not base.WorkerState.PENDING for s in states):
            store.set_phase(
                session=session,
                job_id=lj.id,
                expected_version=lj.version,
                phase=Phase.RUNNING,
                reason="WorkersRunning",
                message=f"{len(workers)} workers running",
                now=at,
            )
            done.running.append(lj.id)
    except (errors.VersionConflict, errors.InvalidTransition, errors.NotFound) as exc:
        done.touched += 1
        log.info("job %s changed meanwhile (%s); next cycle", lj.id, exc)


def orphans(
    backend: base.ClusterBackend,
    live: Mapping[str, store.LiveJob],
    attempts: Mapping[AttemptKey, Sequence[base.WorkerStatus]],
    done: Reconciled,
) -> list[AttemptKey]:
    """Stop every live worker whose job does not hold it; returns those still alive
    (stopping: their GPUs stay reserved in the snapshot until the processes are gone)."""
    draining = []
    for (job_id, attempt), workers in attempts.items():
        if not any(
            w.state in (base.WorkerState.RUNNING, base.WorkerState.PENDING) for w in workers
        ):
            continue
        lj = live.get(job_id)
        if (
            lj is not None
            and lj.phase in (Phase.SCHEDULED, Phase.RUNNING)
            and lj.attempt == attempt
        ):
            continue
        grace = float(lj.spec.termination_grace_period_seconds) if lj is not None else 0.0
        backend.stop(job_id, grace)  # idempotent; keeps the deadline of a first stop
        done.orphans_stopped.append((job_id, attempt))
        draining.append((job_id, attempt))
    return draining
