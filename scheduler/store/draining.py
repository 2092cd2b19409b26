"""Attempts whose workers are still stopping, as the loop last saw them (issue 25 item 1).

Their GPUs are held until the processes or pods are gone, although the job may already
be Cancelled, Preempted or back to Pending; the API's views of the inventory (`/nodes`,
`/cluster/summary`, `/metrics`, the dashboard, `shoal nodes`) read them here to show
those shares as draining, with the job and the time left of its grace period, rather
than idle. The loop replaces the set when it changes (`record`), never every cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.store import convert, schema


@dataclass(frozen=True, slots=True)
class Draining:
    job_id: str
    attempt: int
    queue: str
    placements: tuple[model.WorkerPlacement, ...]
    grace_s: float
    since: datetime  # when the loop first saw it draining: its grace ends `grace_s` later

    @property
    def until(self) -> float:
        """When its grace period ends (epoch seconds)."""
        return self.since.timestamp() + self.grace_s


def record(*, session: Session, stopping: Sequence[model.RunningJob], now: datetime) -> None:
    """Make the table hold exactly these stopping entries (a new one since `now`)."""
    rows = {(r.job_id, r.attempt): r for r in session.scalars(select(schema.DrainingRow))}
    keep = set()
    for run in stopping:
        key = (run.job.id, run.attempt)
        keep.add(key)
        placed = convert.placements_json(run.placements)
        row = rows.get(key)
        if row is None:
            session.add(
                schema.DrainingRow(
                    job_id=run.job.id,
                    attempt=run.attempt,
                    queue=run.job.queue,
                    placements=placed,
                    grace_s=run.job.grace_period_s,
                    since=now,
                )
            )
        elif row.placements != placed:
            row.placements = placed
    for key, row in rows.items():
        if key not in keep:
            session.delete(row)
    session.commit()


def load(*, session: Session) -> list[Draining]:
    rows = session.scalars(select(schema.DrainingRow).order_by(schema.DrainingRow.job_id))
    return [
        Draining(r.job_id, r.attempt, r.queue, convert.placements(r.placements), r.grace_s, r.since)
        for r in rows
    ]
