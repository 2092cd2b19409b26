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
- A backend that launches on threads of its own (`base.AsyncLaunches`: Kubernetes) is
  only handed the launch on the loop's thread; each cycle `settle` takes back the
  launches that finished and finishes them as above (the `Launched` event, or the
  failure). Meanwhile the backend reports their workers pending.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import transition
from scheduler.loop.context import Cycle
from scheduler.loop.enact import enact, stop_quietly
from scheduler.loop.workerenv import env_for
from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store import errors
from scheduler.store.changes import EventWrite, JobEvent
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)
LAUNCHED = "Launched"
LAUNCHING = "Launching"  # before a launch by a backend other replicas cannot see
PLACED = frozenset({Phase.SCHEDULED, Phase.RUNNING})


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, base.BackendError) and exc.transient


def request_for(
    cycle: Cycle, job: LiveJob, placements: Sequence[WorkerPlacement]
) -> base.LaunchRequest:
    """What the backend is asked to start: `job`'s recorded attempt on `placements`, with
    the environment every worker of this loop gets."""
    env = env_for(cycle.worker_env, job.id)
    return base.LaunchRequest(job.id, job.spec, job.attempt, tuple(placements), env, job.origin)


def launch(
    cycle: Cycle,
    job: LiveJob,
    placements: Sequence[WorkerPlacement],
    *,
    launched: list[EventWrite] | None = None,
) -> bool:
    """Launch the attempt `job` holds (as the store holds it now, the attempt recorded) on
    `placements`; on failure make it the job's reason (see the module doc). True when the
    backend took the launch. With `launched`, its `Launched` event goes there, for the
    caller to write with others'. A backend that launches on threads of its own
    (`base.AsyncLaunches`) only queues it here: `settle` finishes it."""
    db, backend, now = cycle.db, cycle.backend, cycle.now
    request = request_for(cycle, job, placements)
    abilities = backend.capabilities()
    local = abilities.local_workers
    if local is not None:
        # Said before the first worker starts: a replica that takes over after this one
        # died partway through knows the attempt is another's (it cannot see its
        # workers) and never starts it a second time.
        began = {"attempt": request.attempt, **_made_by(local)}
        at = as_datetime(now)
        _event(db, request.job_id, LAUNCHING, "Launching", f"attempt {request.attempt}", at, began)
    try:
        if abilities.async_launches is not None:
            abilities.async_launches.launch_async(request, _unguarded)
            return True
        backend.launch(request)
    except Exception as exc:
        _failed(cycle, job, request, exc)
        return False
    _succeeded(cycle, request, launched)
    return True


def settle(cycle: Cycle, live: Mapping[str, LiveJob]) -> int:
    """Finish the launches the backend ran on its own threads since the last cycle, as
    `launch` finishes its own: `Launched` events for those done (in one write), the
    failed ones made their job's reason. A launch of an attempt its job no longer holds
    is left alone (the job moved on; orphans are stopped). How many jobs it wrote."""
    deferred = cycle.backend.capabilities().async_launches
    if deferred is None:
        return 0
    launched: list[EventWrite] = []
    wrote = 0
    for request, error in deferred.settled():
        job = live.get(request.job_id)
        if job is None or job.attempt != request.attempt or job.phase not in PLACED:
            continue
        wrote += 1
        try:
            if error is None:
                _succeeded(cycle, request, launched)
            else:
                _failed(cycle, job, request, error)
        except Exception as exc:  # that job's trouble: the others are settled
            cycle.on_error(request.job_id, "launch", exc)
    if launched:
        cycle.db.append_events(events=launched, now=as_datetime(cycle.now))
    return wrote


def _unguarded(what: str) -> None:
    """The guard of an unfenced backend's launch: nothing to check (the fence wraps it
    in its own, `scheduler.loop.fence`)."""


def _failed(cycle: Cycle, job: LiveJob, request: base.LaunchRequest, exc: Exception) -> None:
    """A launch that failed: finished later (transient), else the job back to Pending
    with the backend's words and a backoff, what the attempt made stopped."""
    db, backend, now = cycle.db, cycle.backend, cycle.now
    job_id, at = request.job_id, as_datetime(now)
    delay = cycle.memory.launches.hold(job_id, now)
    what = f"launch of attempt {request.attempt} failed: {exc}"
    if _is_transient(exc):
        log.warning("%s; finishing it in %.0fs", what, delay)
        _event(db, job_id, "LaunchRetry", "ClusterUnavailable", what, at)
        return
    log.warning("job %s: %s; back to pending for %.0fs", job_id, what, delay)
    grace = float(request.spec.termination_grace_period_seconds)
    refused = transition.launch_refused(
        f"{what}; retrying in {delay:.0f}s", request.attempt, delay, grace
    )
    # What the attempt made so far is stopped (the transition's stop).
    [result] = enact(db, backend, [(job, refused)], now=now)
    if isinstance(result, errors.MOVED_ON):
        log.info("job %s changed meanwhile (%s)", job_id, result)
        stop_quietly(backend, job_id, grace)
    elif isinstance(result, Exception):
        raise result from exc


def _succeeded(
    cycle: Cycle, request: base.LaunchRequest, launched: list[EventWrite] | None
) -> None:
    """Its `Launched` event (into `launched` when given, else written now)."""
    cycle.memory.launches.clear(request.job_id)
    data: dict[str, object] = {"attempt": request.attempt}
    local = cycle.backend.capabilities().local_workers
    if local is not None:
        data.update(_made_by(local))
    said = f"attempt {request.attempt}: {len(request.placements)} worker(s) created"
    if launched is not None:
        launched.append(EventWrite(request.job_id, LAUNCHED, "Launched", said, data))
    else:
        at = as_datetime(cycle.now)
        _event(cycle.db, request.job_id, LAUNCHED, "Launched", said, at, data)


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
    """One event of the job (none for a job deleted meanwhile)."""
    db.append_events(events=[EventWrite(job_id, kind, reason, message, data)], now=at)


def launched_by(events: Sequence[JobEvent], attempt: int) -> str | None:
    """The backend instance that launched (job, attempt), or began to, when its
    `Launched` or `Launching` event says."""
    by = _launch_data(events, attempt).get("backend")
    return by if isinstance(by, str) else None


def launched_state(events: Sequence[JobEvent], attempt: int) -> str | None:
    """The state directory of the local backend that launched (job, attempt)."""
    state = _launch_data(events, attempt).get("state")
    return state if isinstance(state, str) else None


def _launch_data(events: Sequence[JobEvent], attempt: int) -> dict[str, object]:
    for e in reversed(events):
        if e.kind in (LAUNCHED, LAUNCHING) and (e.data or {}).get("attempt") == attempt:
            return dict(e.data or {})
    return {}


def launched_at(
    db: LiveStore,
    job_id: str,
    attempt: int,
    *,
    events: Sequence[JobEvent] | None = None,
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
