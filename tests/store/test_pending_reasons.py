"""Many pending reasons in one write (`store.cycle.set_pending_reasons`, the loop's apply
step): each job ends as `set_pending_reason` alone would leave it, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from storebuild import job, queue

from scheduler import store
from scheduler.model import PendingReason, ReasonCode, WorkerPlacement
from scheduler.store import cycle
from scheduler.store.db import Database

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("vision"))
    return database


def _jobs(db: Database, n: int) -> list[str]:
    with db.session() as s:
        return [
            store.submit_job(session=s, spec=job(name=f"j{i}"), submitter="al", now=T0)[0].id
            for i in range(n)
        ]


def _reason(text: str, **details: object) -> PendingReason:
    return PendingReason(ReasonCode.NO_NODE, text, dict(details))


def _stored(db: Database, job_id: str) -> tuple[int, str | None, str | None, object]:
    with db.session() as s:
        row = store.get_job(session=s, job_id=job_id)
        return row.version, row.pending_code, row.pending_message, row.pending_details


def test_all_reasons_written_at_once(db: Database) -> None:
    ids = _jobs(db, 5)
    with db.session() as s:
        done = cycle.set_pending_reasons(
            session=s, reasons=[(j, 1, _reason(f"why {j}", free=i)) for i, j in enumerate(ids)]
        )
    assert done == ids
    for i, j in enumerate(ids):
        assert _stored(db, j) == (2, "NoFittingNode", f"why {j}", {"free": i})


def test_a_job_that_moved_on_is_skipped_and_the_others_written(db: Database) -> None:
    a, b, c = _jobs(db, 3)
    with db.session() as s:
        store.record_placement(
            session=s,
            job_id=b,
            expected_version=1,
            placements=[WorkerPlacement(0, "n1", (0,), 1.0)],
            attempt=1,
        )
    with db.session() as s:
        done = cycle.set_pending_reasons(
            session=s, reasons=[(j, 1, _reason("full")) for j in (a, b, c)]
        )
    assert done == [a, c]
    assert _stored(db, a)[2] == "full" and _stored(db, c)[2] == "full"
    assert _stored(db, b)[1:3] == (None, None)  # Scheduled: no reason written


def test_a_repeat_is_no_write_and_a_details_change_is(db: Database) -> None:
    a, b = _jobs(db, 2)
    with db.session() as s:
        cycle.set_pending_reasons(
            session=s, reasons=[(a, 1, _reason("full", free=1)), (b, 1, _reason("full", free=1))]
        )
    with db.session() as s:
        done = cycle.set_pending_reasons(
            session=s, reasons=[(a, 2, _reason("full", free=1)), (b, 2, _reason("full", free=2))]
        )
    assert sorted(done) == sorted([a, b])
    assert _stored(db, a) == (2, "NoFittingNode", "full", {"free": 1})  # no version bump
    assert _stored(db, b) == (3, "NoFittingNode", "full", {"free": 2})
