"""Step 1 of a cycle: bring each live job's phase in line with what its workers do.

For a job holding a placement (Scheduled/Running) at attempt N, the backend's workers of
(job, N) decide: some or all missing and the launch never completed (no `Launched`
event for N) -> finish the launch (the previous process crashed, or the API server was
away; `launch` is idempotent); missing after a completed launch, once `MISSING_GRACE_S`
has passed -> the attempt failed; all running -> Running; all succeeded -> Succeeded;
any failed -> retry as a new attempt while `backoffLimit` allows, else Failed. Failures
that are the infrastructure's (`WorkerStatus.retryable`, pods gone) retry without using
up `backoffLimit`. Running past `maxRuntime` -> Failed. A cancel
request -> Cancelled. Store first, backend second: a crash in between leaves workers
whose job no longer holds them, and `orphans` stops those on the next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from scheduler.backends import base
from scheduler.loop import backoff as retry
from scheduler.loop import faults
from scheduler.loop.clock import as_datetime
from scheduler.loop.workerenv import WorkerEnv, env_for
from scheduler.spec import Phase
from scheduler.store import cycle as store
from scheduler.store import errors, jobs

log = logging.getLogger(__name__)

AttemptKey = tuple[str, int]
# After a launch completed, workers the backend does not report are only called missing
# once this long has passed (a watch cache may lag behind the launch that made them).
MISSING_GRACE_S = 30.0


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
    """Failed attempts that count against `backoffLimit` (infrastructure ones do not:
    they are recorded as `AttemptInterrupted`)."""
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
    extra_env: WorkerEnv,
    done: Reconciled,
    backoff: retry.Backoff | None = None,
    missing_grace_s: float = MISSING_GRACE_S,
    retries: retry.Backoff | None = None,
) -> None:
    """Reconcile one live job; a version conflict just leaves it for the next cycle.
    `retries` spaces a failed job's next attempts out exponentially (the loop leaves the
    job out of the pending set until its delay is over)."""
    at = as_datetime(now)
    backoff = retry.Backoff() if backoff is None else backoff
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
            retry.stop_quietly(backend, lj.id, grace, reason=base.StopReason.CANCELLED)
            done.cancelled.append(lj.id)
            return
        states = [w.state for w in workers]
        failed = [w for w in workers if w.state is base.WorkerState.FAILED]
        present = {w.worker for w in workers}
        missing = sorted(set(range(lj.spec.workers)) - present)
        if not failed and missing:
            since = retry.launched_at(session, lj.id, lj.attempt)
            if since is None:
                # The launch never completed (a crash, a transient API error): finish it;
                # names are deterministic, so what exists is found, not made twice.
                if backoff.active(lj.id, now):
                    return
                request = base.LaunchRequest(
                    lj.id, lj.spec, lj.attempt, lj.placements, env_for(extra_env, lj.id)
                )
                if retry.launch(
                    session, backend, request, version=lj.version, now=now, backoff=backoff
                ):
                    done.launched.append(lj.id)
                else:
                    done.touched += 1
                faults.point("reconcile:relaunched")
                return
            if now - since < missing_grace_s:
                return  # the backend's view may lag behind the launch; look again later
        if failed or missing:
            w = failed[0] if failed else None
            if w is not None:
                why = f"worker {w.worker}: {w.message or 'failed'}"
            else:
                shown = ", ".join(str(m) for m in missing[:8])
                why = f"worker(s) {shown} gone after the launch (pods deleted or node lost)"
            # The infrastructure's failure (node lost, evicted, refused at admission, pods
            # gone) retries without using up backoffLimit; the job's own counts.
            interrupted = all(f.retryable for f in failed)
            if interrupted or _failures(session, lj.id) < lj.spec.backoff_limit:
                delay = retries.hold(lj.id, now) if retries is not None else 0.0
                when = f"retrying in {delay:.0f}s" if delay else "retrying"
                store.append_event(
                    session=session,
                    job_id=lj.id,
                    kind="AttemptInterrupted" if interrupted else "AttemptFailed",
                    reason="Interrupted" if interrupted else "WorkerFailed",
                    message=f"attempt {lj.attempt}: {why}",
                    now=at,
                )
                store.set_phase(
                    session=session,
                    job_id=lj.id,
                    expected_version=lj.version,
                    phase=Phase.PENDING,
                    reason="InfrastructureRetry" if interrupted else "BackoffRetry",
                    message=f"attempt {lj.attempt} failed ({why}); {when}",
                    count_restart=True,
                    now=at,
                )
                if interrupted:  # a broken node or device plugin must not be a hot loop
                    backoff.hold(lj.id, now)
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
            # The rest of a broken gang is of no use: stopped at once (a backend never
            # force-deletes; the Kubernetes one deletes with a grace of at least 1 s).
            retry.stop_quietly(backend, lj.id, 0.0, reason=base.StopReason.FAILED)
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
            retry.stop_quietly(backend, lj.id, grace, reason=base.StopReason.MAX_RUNTIME)
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
    session: Session | None = None,
) -> list[AttemptKey]:
    """Stop every live worker whose job does not hold it; returns those still alive
    (stopping: their GPUs stay reserved in the snapshot until the processes are gone).
    A job that has ended (cancelled, past maxRuntime: not live) is looked up in the
    store through `session`, so a stop repeated or first made here (after a crash) keeps
    the job's own grace period and reason rather than killing at once."""
    draining = []
    for (job_id, attempt), workers in attempts.items():
        if not any(
            w.state in (base.WorkerState.RUNNING, base.WorkerState.PENDING) or w.still_running
            for w in workers
        ):
            continue
        lj = live.get(job_id)
        if (
            lj is not None
            and lj.phase in (Phase.SCHEDULED, Phase.RUNNING)
            and lj.attempt == attempt
        ):
            continue
        grace, reason = _stop_terms(session, job_id, lj)
        # Idempotent: a repeat keeps the first stop's deadline and reason.
        retry.stop_quietly(backend, job_id, grace, reason=reason)
        done.orphans_stopped.append((job_id, attempt))
        draining.append((job_id, attempt))
    return draining


def _stop_terms(
    session: Session | None, job_id: str, lj: store.LiveJob | None
) -> tuple[float, base.StopReason]:
    """The grace period and reason of an orphan's stop, from its job when known."""
    if lj is not None:
        return float(lj.spec.termination_grace_period_seconds), base.StopReason.STOPPED
    if session is None:
        return 0.0, base.StopReason.STOPPED
    try:
        row = jobs.get_job(session=session, job_id=job_id)
        grace = float(int(row.spec.get("terminationGracePeriodSeconds", 30)))
    except (errors.NotFound, TypeError, ValueError):
        return 0.0, base.StopReason.STOPPED
    last = row.conditions[-1].get("reason", "") if row.conditions else ""
    if row.phase == Phase.CANCELLED:
        return grace, base.StopReason.CANCELLED
    if last == "MaxRuntimeExceeded":
        return grace, base.StopReason.MAX_RUNTIME
    return grace, base.StopReason.STOPPED
