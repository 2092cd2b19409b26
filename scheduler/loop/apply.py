"""Step 6 of a cycle: carry out the core's decisions, store first, backend second.

- Preempt: Preempted (restart counted), then Pending again with its submission time
  untouched (so it keeps its place), then `backend.stop` with the grace period
  (`transition.preempt`, carried out by `enact` like every phase change). A crash
  before the stop leaves workers their job no longer holds; the next cycle stops them.
- Place: every placement recorded (attempt = previous + 1) in one transaction BEFORE any
  `backend.launch`, then each launched, then their `Launched` events in one write. A
  crash after the record leaves Scheduled jobs without workers (or without the event),
  whose launch the next cycle finishes; the backend ignores a second launch of one
  attempt. No attempt runs twice.
- Resize (an elastic job): its new placements and a `Resized` event, then the backend
  starts the new workers or stops the removed ones (`resize`).
- Foreign pods (a backend's `ForeignWorkloads`, not in the store): Place binds them.
- Keep pending: the reasons that changed, in one write (the store skips repeats).
Every store write goes through `enact`, many jobs at once.
An exception while carrying out one job's decision goes to `on_error` (the loop makes it
that job's reason, with a backoff) and the other decisions are still carried out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from scheduler import model
from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import faults, launching, resize, transition
from scheduler.loop.context import Cycle
from scheduler.loop.enact import enact, stop_quietly, taken
from scheduler.spec import Phase
from scheduler.store.changes import EventWrite
from scheduler.store.live import LiveJob

log = logging.getLogger(__name__)


@dataclass
class Applied:
    placed: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    pending: int = 0
    launch_failed: list[str] = field(default_factory=list)
    violations: list[model.Violation] = field(default_factory=list)
    # The jobs as this step left them in the store, for the loop's cache.
    wrote: list[LiveJob] = field(default_factory=list)


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
    cycle: Cycle,
    result: model.CycleResult,
    live: Mapping[str, LiveJob],
    foreign_ids: Set[str] = frozenset(),
) -> Applied:
    """Carry out `result` (see the module doc). The memory's `reasons` say what was last
    written per job, so an unchanged reason costs no store round trip; a launch or bind
    the cluster refuses becomes that job's reason, with its launch backoff; the other
    decisions are still carried out."""
    abilities = cycle.backend.capabilities()
    out = Applied(violations=list(result.violations))
    report_violations(result.violations, cycle.memory.violations)
    _preempt_all(cycle, result.preempts, live, out)
    out.resized = resize.apply_all(cycle, result.resizes, live, out.wrote)
    ours = []
    for place in result.places:
        if abilities.foreign is not None and place.job_id in foreign_ids:
            _bind(cycle, abilities.foreign, place, out)  # a foreign pod: bind it
        else:
            ours.append(place)
    _place_all(cycle, ours, live, out)
    changed: list[tuple[LiveJob, model.PendingReason]] = []
    for keep in result.pending:
        try:
            _keep(cycle, keep, live, abilities.pending_notes, foreign_ids, out, changed)
        except Exception as exc:
            cycle.on_error(keep.job_id, "recording the pending reason", exc)
    _write_reasons(cycle, changed, out)
    return out


def _write_reasons(
    cycle: Cycle, changed: list[tuple[LiveJob, model.PendingReason]], out: Applied
) -> None:
    """The reasons that changed, in one write; the memory keeps what was written."""
    todo = [(lj, transition.waits(reason)) for lj, reason in changed]
    results = enact(cycle.db, cycle.backend, todo, now=cycle.now)
    for (lj, reason), result in zip(changed, results, strict=True):
        if (job := taken(result, lj.id, "recording the pending reason", cycle.on_error)) is None:
            continue
        cycle.memory.reasons[lj.id] = reason
        out.wrote.append(job)


def _preempt_all(
    cycle: Cycle,
    preempts: Sequence[model.Preempt],
    live: Mapping[str, LiveJob],
    out: Applied,
) -> None:
    """Each preemption recorded (Preempted, then Pending again), then its workers stopped;
    a victim no longer holding GPUs in the store is only stopped."""
    todo = []
    for p in preempts:
        lj = live.get(p.job_id)
        if lj is None or lj.phase not in (Phase.SCHEDULED, Phase.RUNNING):
            stop_quietly(cycle.backend, p.job_id, p.grace_period_s,
                         reason=base.StopReason.PREEMPTED)  # fmt: skip
            continue
        message = p.reason + (f" (for {p.for_job})" if p.for_job else "")
        todo.append((lj, transition.preempt(p.grace_period_s, message)))
    results = enact(cycle.db, cycle.backend, todo, now=cycle.now)
    for (lj, _), result in zip(todo, results, strict=True):
        if (job := taken(result, lj.id, "preemption", cycle.on_error)) is not None:
            out.preempted.append(lj.id)
            out.wrote.append(job)


def _bind(cycle: Cycle, foreign: base.ForeignWorkloads, place: model.Place, out: Applied) -> None:
    try:
        for p in place.placements:  # one pod, or each pod of a PodGroup's gang
            foreign.bind_foreign(place.job_id, p)
    except Exception as exc:
        delay = cycle.memory.launches.hold(place.job_id, cycle.now)
        log.warning("bind of %s failed (%s); retry in %.0fs", place.job_id, exc, delay)
        return
    out.placed.append(place.job_id)


def _place_all(
    cycle: Cycle, places: Sequence[model.Place], live: Mapping[str, LiveJob], out: Applied
) -> None:
    """Record every placement as a new attempt (one transaction), then launch each, then
    write their `Launched` events together."""
    todo = [(p, lj) for p in places if (lj := live.get(p.job_id)) and lj.phase is Phase.PENDING]
    if not todo:
        return
    moves = [(lj, transition.place(p.placements, lj.attempt + 1)) for p, lj in todo]
    results = enact(cycle.db, cycle.backend, moves, now=cycle.now)
    launched: list[EventWrite] = []
    for (place, lj), result in zip(todo, results, strict=True):
        if (job := taken(result, lj.id, "placement", cycle.on_error)) is None:
            continue
        out.wrote.append(job)
        try:
            _launch(cycle, job, place, out, launched)
        except Exception as exc:
            cycle.on_error(lj.id, "placement", exc)
    cycle.db.append_events(events=launched, now=as_datetime(cycle.now))


def _launch(
    cycle: Cycle,
    lj: LiveJob,
    place: model.Place,
    out: Applied,
    launched: list[EventWrite],
) -> None:
    """Launch the attempt `lj` holds, just recorded (its `Launched` event into `launched`)."""
    cycle.memory.reasons.pop(lj.id, None)  # the placement cleared the stored reason
    ok = launching.launch(cycle, lj, place.placements, launched=launched)
    faults.point("place:launched")
    (out.placed if ok else out.launch_failed).append(lj.id)


def _keep(
    cycle: Cycle,
    keep: model.KeepPending,
    live: Mapping[str, LiveJob],
    notes: base.PendingNotes | None,
    foreign_ids: Set[str],
    out: Applied,
    changed: list[tuple[LiveJob, model.PendingReason]],
) -> None:
    written = cycle.memory.reasons
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
        changed.append((lj, keep.reason))
