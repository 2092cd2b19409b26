"""The loop's writes to one job: its placement (Pending -> Scheduled), its phase along
the life cycle (`TRANSITIONS`), and why it waits (pending reasons).

Every write checks the job's version (`expected_version`, from `LiveJob.version`) and
raises `errors.VersionConflict` when the job moved on meanwhile; each function commits
its own transaction and returns the job's new version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from scheduler import model
from scheduler.spec import Phase
from scheduler.store import convert, schema
from scheduler.store.changes import Change, Move, NewAttempt, Waits, refusal
from scheduler.store.live import HOLDS_GPUS
from scheduler.store.rows import add_event, cas_update, current_row


def _refuse(row: schema.JobRow, change: Change) -> None:
    """Raise why the stored job cannot take `change` (`changes.refusal`), if it cannot."""
    why = refusal(row.id, Phase(row.phase), row.cancel_requested, change)
    if why is not None:
        raise why


def _condition(phase: Phase, reason: str, message: str, at: datetime) -> dict[str, Any]:
    return {
        "type": phase.value,
        "status": "True",
        "reason": reason or phase.value,
        "message": message,
        "lastTransitionTime": at.isoformat(),
    }


def record_placement(
    *,
    session: Session,
    job_id: str,
    expected_version: int,
    placements: Sequence[model.WorkerPlacement],
    attempt: int,
    now: datetime | None = None,
) -> int:
    """Pending -> Scheduled with every worker's placement, written BEFORE launching so a
    crash after it cannot place the job twice. `attempt` numbers this launch (the backend
    makes a repeat launch of one attempt a no-op)."""
    row = current_row(session, job_id)
    _refuse(row, NewAttempt(tuple(placements), attempt))
    at = now or schema.utcnow()
    values = placement_values(row.conditions, placements, attempt, at)
    version = cas_update(session, job_id=job_id, expected_version=expected_version, values=values)
    add_event(session, job_id=job_id, kind="Scheduled", at=at, **scheduled_event(values))
    session.commit()
    return version


def phase_values(
    conditions: Sequence[Mapping[str, Any]], phase: Phase, reason: str, message: str, at: datetime
) -> dict[str, Any]:
    """The columns a move to `phase` writes: Running stamps started_at, a finished phase
    finished_at; leaving Scheduled/Running releases the placements."""
    values: dict[str, Any] = {
        "phase": phase.value,
        "conditions": [*conditions, _condition(phase, reason, message, at)][-20:],
    }
    if phase is Phase.RUNNING:
        values["started_at"] = at
    if phase not in HOLDS_GPUS:
        values["placements"] = []
    if phase in (Phase.PENDING, Phase.PREEMPTED):
        values.update(scheduled_at=None, started_at=None, resized_at=None)
    if phase.finished:
        values["finished_at"] = at
    return values


def placement_values(
    conditions: Sequence[Mapping[str, Any]],
    placements: Sequence[model.WorkerPlacement],
    attempt: int,
    at: datetime,
) -> dict[str, Any]:
    """The columns Pending -> Scheduled writes (the placement as attempt `attempt`)."""
    return {
        "phase": Phase.SCHEDULED.value,
        "placements": convert.placements_json(placements),
        "attempt": attempt,
        "scheduled_at": at,
        "started_at": None,
        "resized_at": None,
        "pending_code": None,
        "pending_message": None,
        "pending_details": None,
        "conditions": [*conditions, _condition(Phase.SCHEDULED, "", "", at)][-20:],
    }


def scheduled_event(values: Mapping[str, Any]) -> dict[str, Any]:
    """The message and data of the `Scheduled` event of a placement's `values`."""
    nodes = sorted({p["node"] for p in values["placements"]})
    attempt = values["attempt"]
    return {
        "message": f"attempt {attempt} on {', '.join(nodes)}",
        "data": {"attempt": attempt, "placements": values["placements"]},
    }


def set_phase(
    *,
    session: Session,
    job_id: str,
    expected_version: int,
    phase: Phase,
    reason: str = "",
    message: str = "",
    count_restart: bool = False,
    now: datetime | None = None,
) -> int:
    """Move a job along its life cycle (see `TRANSITIONS`). Leaving Scheduled/Running
    releases its placements; Running stamps started_at, a finished phase finished_at;
    `count_restart` adds one to `restarts` (a failed attempt that will be retried)."""
    row = current_row(session, job_id)
    _refuse(row, Move(phase))
    at = now or schema.utcnow()
    values = phase_values(row.conditions, phase, reason, message, at)
    if count_restart:
        values["restarts"] = row.restarts + 1
    version = cas_update(session, job_id=job_id, expected_version=expected_version, values=values)
    add_event(session, job_id=job_id, kind=phase.value, reason=reason, message=message, at=at)
    session.commit()
    return version


def set_pending_reason(
    *,
    session: Session,
    job_id: str,
    reason: model.PendingReason,
    expected_version: int | None = None,
) -> int:
    """Why a Pending job waits. An unchanged reason writes nothing (no version bump), so
    a loop that repeats the reason every cycle does not race users' cancels."""
    row = current_row(session, job_id)
    _refuse(row, Waits(reason))
    details = {str(k): v for k, v in reason.details.items()}
    if (row.pending_code, row.pending_message, row.pending_details) == (
        reason.code.value,
        reason.message,
        details,
    ):
        return row.version
    version = cas_update(
        session,
        job_id=job_id,
        expected_version=row.version if expected_version is None else expected_version,
        values={
            "pending_code": reason.code.value,
            "pending_message": reason.message,
            "pending_details": details,
        },
    )
    session.commit()
    return version
