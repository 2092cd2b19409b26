"""Step 6 of a cycle: carry out the core's decisions, store first, backend second.

- Preempt: Preempted (restart counted), then Pending again with its submission time
  untouched (so it keeps its place), then `backend.stop` with the grace period
  (`lifecycle.preempt`, carried out by `enact` like every phase change). A crash
  before the stop leaves workers their job no longer holds; the next cycle stops them.
- Place: `record_placement` with attempt = previous + 1 BEFORE `backend.launch`. A crash
  after the record leaves a Scheduled job without workers, which the next cycle
  launches; the backend ignores a second launch of one attempt. No attempt runs twice.
- Foreign pods (a backend's `ForeignWorkloads`, not in the store): Place binds them.
- Keep pending: the reasons that changed, in one write (the store skips repeats).
An exception while carrying out one job's decision goes to `on_error` (the loop makes it
that job's reason, with a backoff) and the other decisions are still carried out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field

from scheduler import model
from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import backoff as retry
from scheduler.loop import faults, lifecycle
from scheduler.loop.enact import enact
from scheduler.loop.workerenv import WorkerEnv, env_for
from scheduler.spec import Phase
from scheduler.store import cycle as store
from scheduler.store import errors
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)
_RACES = (errors.VersionConflict, errors.InvalidTransition, errors.NotFound)
# (job id, step, exception): one job's decision could not be carried out.
OnError = Callable[[str, str, Exception], None]


def _raise(job_id: str, step: str, exc: Exception) -> None:
    raise exc


@dataclass
class Applied:
    placed: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    pending: int = 0
    launch_failed: list[str] = field(default_factory=list)
    violations: list[model.Violation] = field(default_factory=list)


def report_violations(
    violations: Sequence[model.Violation], reported: set[model.Violation] | None
) -> None:
    """Log drift when it appears and when it clears, not on every cycle it lasts: pods
    on a NotReady node stay "on an unknown node" for as long as the node is away."""
    now_seen = set(violations)
    before = set() if reported is None else reported
    for v in violations:
        if v not in before:
            log.warning("invariant: %s: %s", v.kind, v.message)
    for v in before - now_seen:
        log.info("invariant cleared: %s: %s", v.kind, v.message)
    if reported is not None:
        reported.clear()
        reported.update(now_seen)


def apply(
    db: LiveStore,
    backend: base.ClusterBackend,
    result: model.CycleResult,
    live: Mapping[str, store.LiveJob],
    *,
    now: float,
    worker_env: WorkerEnv,
    reasons: dict[str, model.PendingReason] | None = None,
    foreign_ids: Set[str] = frozenset(),
    backoff: retry.Backoff | None = None,
    on_error: OnError = _raise,
    reported: set[model.Violation] | None = None,
) -> Applied:
    """`reasons` remembers what was last written per job, so an unchanged reason costs
    no store round trip (the store would skip it too, after a read). A launch or bind the
    cluster refuses becomes that job's reason, with a per-job `backoff` (see
    `scheduler.loop.backoff`); the other decisions are still carried out."""
    written = {} if reasons is None else reasons
    backoff = retry.Backoff() if backoff is None else backoff
    abilities = backend.capabilities()
    foreign, notes = abilities.foreign, abilities.pending_notes
    out = Applied(violations=list(result.violations))
    report_violations(result.violations, reported)
    for p in result.preempts:
        try:
            _preempt(db, backend, p, live, now, out)
        except Exception as exc:
            on_error(p.job_id, "preemption", exc)
    for place in result.places:
        if foreign is not None and place.job_id in foreign_ids:  # a foreign pod: bind it
            try:
                foreign.bind_foreign(place.job_id, place.placements[0])
            except Exception as exc:
                delay = backoff.hold(place.job_id, now)
                log.warning("bind of %s failed (%s); retry in %.0fs", place.job_id, exc, delay)
                continue
            out.placed.append(place.job_id)
            continue
        try:
            _place(db, backend, place, live, now, worker_env, written, backoff, out)
        except Exception as exc:
            on_error(place.job_id, "placement", exc)
    changed: list[tuple[str, int, model.PendingReason]] = []
    for keep in result.pending:
        try:
            _keep(keep, live, written, notes, foreign_ids, out, changed)
        except Exception as exc:
            on_error(keep.job_id, "recording the pending reason", exc)
    _write_reasons(db, changed, written, on_error)
    return out


def _write_reasons(
    db: LiveStore,
    changed: list[tuple[str, int, model.PendingReason]],
    written: dict[str, model.PendingReason],
    on_error: OnError,
) -> None:
    """The reasons that changed, in one write; if that fails, job by job, so one job's
    trouble is that job's."""
    try:
        done = db.set_pending_reasons(reasons=changed)
    except Exception:
        db.rollback()
        done = []
        for job_id, _, reason in changed:
            try:
                db.set_pending_reason(job_id=job_id, reason=reason)
            except _RACES:
                continue
            except Exception as exc:
                on_error(job_id, "recording the pending reason", exc)
                continue
            done.append(job_id)
    reason_of = {job_id: reason for job_id, _, reason in changed}
    for job_id in done:
        written[job_id] = reason_of[job_id]


def _preempt(
    db: LiveStore,
    backend: base.ClusterBackend,
    p: model.Preempt,
    live: Mapping[str, store.LiveJob],
    now: float,
    out: Applied,
) -> None:
    lj = live.get(p.job_id)
    if lj is None or lj.phase not in (Phase.SCHEDULED, Phase.RUNNING):
        retry.stop_quietly(backend, p.job_id, p.grace_period_s, reason=base.StopReason.PREEMPTED)
        return
    message = p.reason + (f" (for {p.for_job})" if p.for_job else "")
    try:
        t = lifecycle.preempt(p.grace_period_s, message)
        enact(db, backend, lj.id, lj.version, t, now=now)
    except _RACES as exc:
        log.info("preempt of %s skipped: %s", lj.id, exc)
        return
    out.preempted.append(lj.id)


def _place(
    db: LiveStore,
    backend: base.ClusterBackend,
    place: model.Place,
    live: Mapping[str, store.LiveJob],
    now: float,
    worker_env: WorkerEnv,
    written: dict[str, model.PendingReason],
    backoff: retry.Backoff,
    out: Applied,
) -> None:
    lj = live.get(place.job_id)
    if lj is None or lj.phase is not Phase.PENDING:
        return
    attempt = lj.attempt + 1
    try:
        version = db.record_placement(
            job_id=lj.id,
            expected_version=lj.version,
            placements=place.placements,
            attempt=attempt,
            now=as_datetime(now),
        )
    except _RACES as exc:
        log.info("placement of %s skipped: %s", lj.id, exc)
        return
    written.pop(lj.id, None)  # record_placement cleared the stored reason
    faults.point("place:recorded")
    env = env_for(worker_env, lj.id)
    request = base.LaunchRequest(lj.id, lj.spec, attempt, place.placements, env, lj.origin)
    launched = retry.launch(db, backend, request, version=version, now=now, backoff=backoff)
    faults.point("place:launched")
    if launched:
        out.placed.append(lj.id)
    else:
        out.launch_failed.append(lj.id)


def _keep(
    keep: model.KeepPending,
    live: Mapping[str, store.LiveJob],
    written: dict[str, model.PendingReason],
    notes: base.PendingNotes | None,
    foreign_ids: Set[str],
    out: Applied,
    changed: list[tuple[str, int, model.PendingReason]],
) -> None:
    lj = live.get(keep.job_id)
    if lj is None and keep.job_id in foreign_ids:  # a foreign pod: say why, as
        # kube-scheduler would
        if notes is not None and written.get(keep.job_id) != keep.reason:
            try:
                notes.note_pending(keep.job_id, keep.reason.message)
                written[keep.job_id] = keep.reason
            except Exception as exc:
                log.info("could not report why %s waits: %s", keep.job_id, exc)
        return
    if lj is None or lj.phase is not Phase.PENDING:
        return
    out.pending += 1
    if written.get(lj.id) != keep.reason:
        changed.append((lj.id, lj.version, keep.reason))
