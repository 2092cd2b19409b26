"""One job's trouble stays that job's: backend calls that fail become its reason, with a
per-job backoff, and the cycle goes on with the other jobs.

- A refused launch (`BackendError` that is not transient: a webhook's denial, a
  ResourceQuota, RBAC, an invalid object) sends the job back to Pending with reason
  `LaunchFailed` and the API server's words; what the attempt had made is stopped. The
  job is left out of the next cycles' pending set until its backoff ends (5 s, doubling,
  at most 5 min). It uses up no `backoffLimit`: the job never ran.
- A transient failure (API server unreachable) keeps the placement: a launch is
  resumable (deterministic names), so reconcile finishes it once the backoff ends.
- A stop that fails is logged; the store already says the job no longer holds the
  workers, so the next cycle's orphan sweep repeats it.
- Every launch that returns records a `Launched` event with its attempt (and the
  backend's `instance`, where it has one): from then on, workers that are missing are a
  failed attempt, not an unfinished launch. A backend whose workers other replicas
  cannot see (local) records `Launching` with its instance before the launch, so an
  attempt a dead replica began is never started again by another.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from scheduler import model
from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.spec import Phase
from scheduler.store import errors, schema
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)
_RACES = (errors.VersionConflict, errors.InvalidTransition, errors.NotFound)
LAUNCHED = "Launched"
LAUNCHING = "Launching"  # before a launch by a backend other replicas cannot see


@dataclass
class Backoff:
    """job id -> when it may be tried again; the delay doubles with each failure."""

    base_s: float = 5.0
    max_s: float = 300.0
    _until: dict[str, float] = field(default_factory=dict)
    _failures: dict[str, int] = field(default_factory=dict)

    def hold(self, job_id: str, now: float) -> float:
        """Record one more failure of `job_id`; returns the delay before the next try."""
        delay = self.peek(job_id)
        self._failures[job_id] = self._failures.get(job_id, 0) + 1
        self._until[job_id] = now + delay
        return delay

    def peek(self, job_id: str) -> float:
        """The delay the next `hold(job_id, ...)` would return, changing nothing."""
        n = self._failures.get(job_id, 0) + 1
        return float(min(self.max_s, self.base_s * 2.0 ** (n - 1)))

    def active(self, job_id: str, now: float) -> bool:
        return self._until.get(job_id, 0.0) > now

    def until(self, job_id: str) -> float | None:
        return self._until.get(job_id)

    def next_expiry(self, now: float) -> float | None:
        """The earliest time after `now` at which some held job may be tried again."""
        return min((u for u in self._until.values() if u > now), default=None)

    def clear(self, job_id: str) -> None:
        self._until.pop(job_id, None)
        self._failures.pop(job_id, None)

    def keep_only(self, job_ids: set[str]) -> None:
        for k in [k for k in self._failures if k not in job_ids]:
            self.clear(k)


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, base.BackendError) and exc.transient


def stop_quietly(
    backend: base.ClusterBackend,
    job_id: str,
    grace_period_s: float,
    *,
    reason: str = base.StopReason.STOPPED,
) -> bool:
    """`backend.stop`, its failure logged (the orphan sweep repeats it next cycle)."""
    try:
        backend.stop(job_id, grace_period_s, reason=reason)
        return True
    except Exception as exc:
        log.warning("stop of %s failed (%s); the next cycle repeats it", job_id, exc)
        return False


def launch(
    db: LiveStore,
    backend: base.ClusterBackend,
    request: base.LaunchRequest,
    *,
    version: int,
    now: float,
    backoff: Backoff,
) -> bool:
    """Launch one attempt; on failure make it the job's reason (see the module doc).
    True when the backend took the launch."""
    job_id, at = request.job_id, as_datetime(now)
    local = backend.capabilities().local_workers
    if local is not None:
        # Said before the first worker starts: a replica that takes over after this one
        # died partway through knows the attempt is another's (it cannot see its
        # workers) and never starts it a second time.
        began = {"attempt": request.attempt, **_made_by(local)}
        _event(db, job_id, LAUNCHING, "Launching", f"attempt {request.attempt}", at, began)
    try:
        backend.launch(request)
    except Exception as exc:
        delay = backoff.hold(job_id, now)
        what = f"launch of attempt {request.attempt} failed: {exc}"
        if _is_transient(exc):
            log.warning("%s; finishing it in %.0fs", what, delay)
            _event(db, job_id, "LaunchRetry", "ClusterUnavailable", what, at)
            return False
        log.warning("job %s: %s; back to pending for %.0fs", job_id, what, delay)
        message = f"{what}; retrying in {delay:.0f}s"
        try:
            db.set_phase(
                job_id=job_id,
                expected_version=version,
                phase=Phase.PENDING,
                reason="LaunchFailed",
                message=message,
                now=at,
            )
            db.set_pending_reason(
                job_id=job_id,
                reason=model.PendingReason(
                    model.ReasonCode.LAUNCH_FAILED,
                    message,
                    {"attempt": request.attempt, "retryInSeconds": round(delay)},
                ),
            )
        except _RACES as race:
            log.info("job %s changed meanwhile (%s)", job_id, race)
        grace = float(request.spec.termination_grace_period_seconds)
        stop_quietly(backend, job_id, grace)  # what the attempt made so far
        return False
    backoff.clear(job_id)
    data: dict[str, object] = {"attempt": request.attempt}
    if local is not None:
        data.update(_made_by(local))
    _event(
        db,
        job_id,
        LAUNCHED,
        "Launched",
        f"attempt {request.attempt}: {len(request.placements)} worker(s) created",
        at,
        data,
    )
    return True


def _made_by(local: base.LocalWorkers) -> dict[str, object]:
    """Which backend instance launches, and where it keeps its state: a replica taking
    over on the same host reads the attempt's record there (`backends.local.elsewhere`)."""
    return {"backend": local.instance, "state": str(local.state_dir)}


def _event(
    db: LiveStore,
    job_id: str,
    kind: str,
    reason: str,
    message: str,
    at: datetime,
    data: dict[str, object] | None = None,
) -> None:
    with contextlib.suppress(errors.NotFound):  # deleted meanwhile
        db.append_event(
            job_id=job_id,
            kind=kind,
            reason=reason,
            message=message,
            data=data or {},
            now=at,
        )


def launched_by(events: Sequence[schema.JobEventRow], attempt: int) -> str | None:
    """The backend instance that launched (job, attempt), or began to, when its
    `Launched` or `Launching` event says."""
    by = _launch_data(events, attempt).get("backend")
    return by if isinstance(by, str) else None


def launched_state(events: Sequence[schema.JobEventRow], attempt: int) -> str | None:
    """The state directory of the local backend that launched (job, attempt)."""
    state = _launch_data(events, attempt).get("state")
    return state if isinstance(state, str) else None


def _launch_data(events: Sequence[schema.JobEventRow], attempt: int) -> dict[str, object]:
    for e in reversed(events):
        if e.kind in (LAUNCHED, LAUNCHING) and (e.data or {}).get("attempt") == attempt:
            return dict(e.data or {})
    return {}


def launched_at(
    db: LiveStore,
    job_id: str,
    attempt: int,
    *,
    events: Sequence[schema.JobEventRow] | None = None,
) -> float | None:
    """When the launch of (job, attempt) completed, or None if it never did. `events`:
    the job's events when already read."""
    if events is None:
        events = db.list_events(job_id=job_id)
    for e in reversed(events):
        if e.kind == LAUNCHED and (e.data or {}).get("attempt") == attempt:
            t = e.at if e.at.tzinfo else e.at.replace(tzinfo=UTC)
            return t.timestamp()
    return None
