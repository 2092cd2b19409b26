"""What the CR controller reads to fill its objects' status: a Queue's usage (GPUs held,
jobs waiting and running, over its whole subtree) and, for the status follower, the
columns a TrainingJob's status shows of each job submitted as one.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from scheduler.core import accounting
from scheduler.spec import Phase
from scheduler.store import cluster, convert, schema
from scheduler.store import resizes as history

_HOLDING = (Phase.SCHEDULED.value, Phase.RUNNING.value)
_WAITING = (Phase.PENDING.value, Phase.PREEMPTED.value)


def queue_usage(*, session: Session, name: str) -> dict[str, Any]:
    """What a Queue's status shows of its jobs now (the `Allocated` and `Pending` printer
    columns): GPUs held by its placed jobs, jobs waiting (Preempted ones included: they
    wait again), jobs running. A parent counts its whole subtree, as the dashboard does."""
    subtree = accounting.QueueTree.build(cluster.load_queues(session=session)).subtree(name)
    rows = session.execute(
        select(schema.JobRow.phase, schema.JobRow.placements).where(
            schema.JobRow.queue.in_(sorted(subtree)),
            schema.JobRow.phase.in_(_HOLDING + _WAITING),
        )
    ).all()
    allocated = sum(
        p.gpus_held
        for phase, placements in rows
        if phase in _HOLDING
        for p in convert.placements(placements or ())
    )
    return {
        "allocated": round(allocated, 4),
        "pending": sum(1 for phase, _ in rows if phase in _WAITING),
        "running": sum(1 for phase, _ in rows if phase == Phase.RUNNING.value),
    }


class Followed(NamedTuple):
    """A job submitted as a CR, with what its CR's status shows of it (`fingerprint`)."""

    job_id: str
    namespace: str
    name: str | None  # the CR's name and uid, as stored with the job
    uid: str | None
    fingerprint: tuple[object, ...]


def followed_jobs(
    *, session: Session, kind: str, namespaces: Collection[str], finished_since: datetime
) -> list[Followed]:
    """Every job submitted as an object of `kind` in `namespaces` that is live or finished
    at or after `finished_since`: one indexed query (`ix_jobs_origin`). The fingerprint
    leaves out the pending reason's text (rewritten whenever the free room it names
    moves) but keeps its code."""
    j = schema.JobRow
    rows = session.execute(
        select(
            j.id,
            j.origin_namespace,
            j.origin_name,
            j.origin_uid,
            j.phase,
            j.pending_code,
            j.attempt,
            j.restarts,
            j.cancel_requested,
            j.scheduled_at,
            j.started_at,
            j.finished_at,
            j.resized_at,
        ).where(
            j.origin_kind == kind,
            j.origin_namespace.in_(namespaces),
            or_(j.phase.not_in(schema.FINISHED_PHASES), j.finished_at >= finished_since),
        )
    ).all()
    return [Followed(row[0], row[1] or "", row[2], row[3], tuple(row[4:])) for row in rows]


def resizes(*, session: Session, job_id: str, last: int = 10) -> list[dict[str, Any]]:
    """An elastic job's last changes of size (its `Resized` events), oldest first."""
    return [
        {
            "at": r.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "attempt": r.attempt,
            "from": r.previous,
            "to": r.workers,
            "message": r.message,
        }
        for r in map(history.Resized.of, history.history(session=session, job_id=job_id)[-last:])
    ]
