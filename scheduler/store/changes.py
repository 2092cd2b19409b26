"""What the loop may do to a job, as data, and the job after it: the changes a `JobWrite`
carries (a `Move` along the life cycle, a `NewAttempt` placed, an elastic `Resize`, the
reason it `Waits`), which the job's phase allows (`refusal`), and the `LiveJob` it
leaves (`after`); and what the loop reads back of a job beyond its `LiveJob` (its
`JobEvent`s; how it `Ended`). Every store speaks these the same way: the SQL store as
columns (`batches`), the in-memory one (`memory`) as the jobs themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import errors
from scheduler.store.live import HOLDS_GPUS, LiveJob

# Which phase may follow which; Pending -> Scheduled only through a `NewAttempt`.
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.PENDING: frozenset({Phase.CANCELLED, Phase.FAILED}),
    Phase.SCHEDULED: frozenset(
        {
            Phase.RUNNING,
            Phase.PENDING,
            Phase.PREEMPTED,
            Phase.SUCCEEDED,
            Phase.FAILED,
            Phase.CANCELLED,
        }
    ),
    Phase.RUNNING: frozenset(
        {Phase.SUCCEEDED, Phase.FAILED, Phase.PREEMPTED, Phase.PENDING, Phase.CANCELLED}
    ),
    Phase.PREEMPTED: frozenset({Phase.PENDING, Phase.CANCELLED, Phase.FAILED}),
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.CANCELLED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Move:
    """To `phase` along the life cycle (`TRANSITIONS`); `count_restart`: one more restart."""

    phase: Phase
    reason: str = ""
    message: str = ""
    count_restart: bool = False


@dataclass(frozen=True, slots=True)
class NewAttempt:
    """A Pending job placed: `placements` recorded as attempt `attempt` (Scheduled)."""

    placements: tuple[model.WorkerPlacement, ...]
    attempt: int


@dataclass(frozen=True, slots=True)
class Resize:
    """A Running elastic job's placements become `placements` (same attempt)."""

    placements: tuple[model.WorkerPlacement, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Waits:
    """Why a Pending job waits. A note rather than a change of its life: written whatever
    the job's version while it is Pending, and not at all when it is the one stored."""

    reason: model.PendingReason


Change = Move | NewAttempt | Resize | Waits


@dataclass(frozen=True, slots=True)
class EventWrite:
    job_id: str
    kind: str
    reason: str = ""
    message: str = ""
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class JobWrite:
    """`change` to `job` at the version it was read, with `event` (recorded first) in the
    same transaction."""

    job: LiveJob
    change: Change
    event: EventWrite | None = None


Result = LiveJob | Exception  # the job as it now reads, or why it was not written


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One event of a job's record, as the loop reads it back."""

    kind: str
    reason: str
    message: str
    data: Mapping[str, Any]
    at: datetime


@dataclass(frozen=True, slots=True)
class Ended:
    """What the loop needs of a job that is no longer live to stop its workers: its
    phase, its grace period and the reason of its last move."""

    phase: Phase
    grace_s: float
    reason: str


def refusal(job_id: str, phase: Phase, cancel_requested: bool, change: Change) -> Exception | None:
    """Why a job in `phase` cannot take `change` (None: it can)."""
    if isinstance(change, Move):
        if change.phase in TRANSITIONS[phase]:
            return None
        return errors.InvalidTransition(f"job {job_id} cannot go from {phase} to {change.phase}")
    if isinstance(change, NewAttempt):
        if phase is not Phase.PENDING or cancel_requested:
            return errors.InvalidTransition(f"job {job_id} is {phase}, not Pending")
        return None
    if isinstance(change, Resize):
        if phase is not Phase.RUNNING or cancel_requested:
            return errors.InvalidTransition(f"job {job_id} is {phase}, not Running: no resize")
        return None
    if phase is not Phase.PENDING:
        return errors.InvalidTransition(f"job {job_id} is {phase}, not Pending")
    return None


def after(lj: LiveJob, change: Change, at: datetime) -> LiveJob:
    """`lj` once `change` is written at `at`, one version on. A move to Running stamps
    `started_at`; leaving Scheduled/Running releases the placements; back to Pending or
    Preempted, the attempt's times go; a new attempt starts its own."""
    fields: dict[str, Any] = {"version": lj.version + 1}
    if isinstance(change, Move):
        phase = fields["phase"] = change.phase
        if phase is Phase.RUNNING:
            fields["started_at"] = at
        if phase not in HOLDS_GPUS:
            fields["placements"] = ()
        if phase in (Phase.PENDING, Phase.PREEMPTED):
            fields.update(scheduled_at=None, started_at=None, resized_at=None)
        if change.count_restart:
            fields["restarts"] = lj.restarts + 1
    elif isinstance(change, NewAttempt):
        fields.update(phase=Phase.SCHEDULED, placements=tuple(change.placements),
                      attempt=change.attempt, scheduled_at=at, started_at=None,
                      resized_at=None)  # fmt: skip
    elif isinstance(change, Resize):
        fields.update(placements=tuple(change.placements), resized_at=at)
    return dataclasses.replace(lj, **fields)
