"""Many pending reasons in one write (`store.batches.write` of `Waits`, the loop's apply
step): each job ends as `set_pending_reason` alone would leave it, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from storebuild import job, queue

from scheduler.model import PendingReason, ReasonCode, WorkerPlacement
from scheduler.store import batches, changes, errors
from scheduler.store.db import Database
from scheduler.store.live import LiveJob, live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision"))
    return database


def _jobs(db: Database, n: int) -> list[str]:
    with db.session() as s:
        return [
            submit_job(session=s, spec=job(name=f"j{i}"), submitter="al", now=T0)[0].id
            for i in range(n)
        ]


def _reason(text: str, **details: object) -> PendingReason:
    return PendingReason(ReasonCode.NO_NODE, text, dict(details))


def _waits(
    db: Database, reasons: dict[str, PendingReason], read: dict[str, LiveJob] | None = None
) -> dict[str, changes.Result]:
    """Each job's reason written through one `batches.write`, from the job as `read`
    (else as read now)."""
    with db.session() as s:
        read = read or {lj.id: lj for lj in live_jobs(session=s)}
        writes = [changes.JobWrite(read[j], changes.Waits(r)) for j, r in reasons.items()]
        results = batches.write(session=s, writes=writes, now=T0)
    return dict(zip(reasons, results, strict=True))


def _stored(db: Database, job_id: str) -> tuple[int, str | None, str | None, object]:
    with db.session() as s:
        row = get_job(session=s, job_id=job_id)
        return row.version, row.pending_code, row.pending_message, row.pending_details


def test_all_reasons_written_at_once(db: Database) -> None:
    ids = _jobs(db, 5)
    done = _waits(db, {j: _reason(f"why {j}", free=i) for i, j in enumerate(ids)})
    assert [(r.id, r.version) for r in done.values() if isinstance(r, LiveJob)] == [
        (j, 2) for j in ids
    ]
    for i, j in enumerate(ids):
        assert _stored(db, j) == (2, "NoFittingNode", f"why {j}", {"free": i})


def test_a_job_that_moved_on_is_skipped_and_the_others_written(db: Database) -> None:
    a, b, c = _jobs(db, 3)
    with db.session() as s:
        read = {lj.id: lj for lj in live_jobs(session=s)}  # all three Pending
        record_placement(
            session=s,
            job_id=b,
            expected_version=1,
            placements=[WorkerPlacement(0, "n1", (0,), 1.0)],
            attempt=1,
        )
    done = _waits(db, {j: _reason("full") for j in (a, b, c)}, read)
    assert isinstance(done[b], errors.InvalidTransition), done[b]
    assert isinstance(done[a], LiveJob) and isinstance(done[c], LiveJob)
    assert _stored(db, a)[2] == "full" and _stored(db, c)[2] == "full"
    assert _stored(db, b)[1:3] == (None, None)  # Scheduled: no reason written


def test_a_repeat_is_no_write_and_a_details_change_is(db: Database) -> None:
    a, b = _jobs(db, 2)
    _waits(db, {a: _reason("full", free=1), b: _reason("full", free=1)})
    done = _waits(db, {a: _reason("full", free=1), b: _reason("full", free=2)})
    # Neither was written at the version read (a: no write; b: its details alone moved,
    # written as `set_pending_reason` would): each given back as read, to be read again.
    assert [r.version for r in done.values() if isinstance(r, LiveJob)] == [2, 2]
    assert _stored(db, a) == (2, "NoFittingNode", "full", {"free": 1})  # no version bump
    assert _stored(db, b) == (3, "NoFittingNode", "full", {"free": 2})
