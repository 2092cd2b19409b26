"""Job repository: submission, idempotency, listing, cancel, events."""

from __future__ import annotations

import pytest
from storebuild import job, placement, queue

from scheduler import store
from scheduler.spec import Phase
from scheduler.store import errors
from scheduler.store.db import Database


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("vision", priority=5))
        store.create_queue(session=s, spec=queue("nlp"))
    return database


def test_submit_stores_a_pending_job_with_the_queue_priority(db: Database) -> None:
    with db.session() as s:
        row, created = store.submit_job(session=s, spec=job(gpu=0.5, workers=2), submitter="al")
    assert created and row.phase == Phase.PENDING and row.priority == 5 and row.version == 1
    with db.session() as s:
        again = store.get_job(session=s, job_id=row.id)
        assert again.spec["gpu"] == 0.5 and again.created_at.tzinfo is not None
        assert [e.kind for e in store.list_events(session=s, job_id=row.id)] == ["Submitted"]


def test_unknown_queue_is_refused_and_stores_nothing(db: Database) -> None:
    with db.session() as s:
        with pytest.raises(errors.NotFound) as info:
            store.submit_job(session=s, spec=job(queue="nope"), submitter="al")
        assert info.value.loc == ("queue",)
        assert store.list_jobs(session=s).items == []


def test_idempotency_key(db: Database) -> None:
    with db.session() as s:
        a, created_a = store.submit_job(session=s, spec=job(), submitter="al", idempotency_key="k")
        b, created_b = store.submit_job(session=s, spec=job(), submitter="al", idempotency_key="k")
        assert (created_a, created_b) == (True, False) and a.id == b.id
        with pytest.raises(errors.IdempotencyMismatch):
            store.submit_job(session=s, spec=job(workers=2), submitter="al", idempotency_key="k")
        # keys are per submitter
        c, created_c = store.submit_job(session=s, spec=job(), submitter="bo", idempotency_key="k")
        assert created_c and c.id != a.id
        assert len(store.list_jobs(session=s).items) == 2


def test_list_filters_and_cursor_pagination_newest_first(db: Database) -> None:
    with db.session() as s:
        ids = [
            store.submit_job(
                session=s, spec=job(f"j{i}", queue="vision" if i % 2 else "nlp"), submitter="al"
            )[0].id
            for i in range(7)
        ]
        seen, cursor = [], None
        while True:
            page = store.list_jobs(session=s, limit=3, cursor=cursor)
            seen += [j.id for j in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == ids[::-1]
        vision = store.list_jobs(session=s, queue="vision").items
        assert [j.name for j in vision] == ["j5", "j3", "j1"]
        assert store.list_jobs(session=s, queues=["nlp"], queue="vision").items == []
        assert store.list_jobs(session=s, submitter="bo").items == []
        assert len(store.list_jobs(session=s, phase=Phase.PENDING).items) == 7
        with pytest.raises(errors.Invalid):
            store.list_jobs(session=s, cursor="garbage!")


def test_get_hides_jobs_outside_visible_queues(db: Database) -> None:
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=job(queue="nlp"), submitter="al")
        with pytest.raises(errors.NotFound):
            store.get_job(session=s, job_id=row.id, queues=["vision"])
        with pytest.raises(errors.NotFound):
            store.cancel_job(session=s, job_id=row.id, by="x", queues=["vision"])


def test_cancel_pending_is_immediate_and_idempotent(db: Database) -> None:
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=job(), submitter="al")
        done = store.cancel_job(session=s, job_id=row.id, by="al")
        assert done.phase == Phase.CANCELLED and done.finished_at is not None
        assert store.cancel_job(session=s, job_id=row.id, by="al").version == done.version


def test_cancel_running_is_a_request_for_the_loop(db: Database) -> None:
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=job(), submitter="al")
        v = store.record_placement(
            session=s, job_id=row.id, expected_version=1, placements=[placement()], attempt=1
        )
        store.set_phase(session=s, job_id=row.id, expected_version=v, phase=Phase.RUNNING)
        asked = store.cancel_job(session=s, job_id=row.id, by="al")
        assert asked.phase == Phase.RUNNING and asked.cancel_requested
        live = store.live_jobs(session=s)[0]
        assert live.cancel_requested
        store.set_phase(
            session=s, job_id=row.id, expected_version=live.version, phase=Phase.CANCELLED
        )
        kinds = [e.kind for e in store.list_events(session=s, job_id=row.id)]
        assert kinds == ["Submitted", "Scheduled", "Running", "CancelRequested", "Cancelled"]


def test_cancel_of_a_finished_job_conflicts(db: Database) -> None:
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=job(), submitter="al")
        store.set_phase(session=s, job_id=row.id, expected_version=1, phase=Phase.FAILED)
        with pytest.raises(errors.Conflict, match="already Failed"):
            store.cancel_job(session=s, job_id=row.id, by="al")


def test_count_by_phase(db: Database) -> None:
    with db.session() as s:
        row, _ = store.submit_job(session=s, spec=job(), submitter="al")
        store.submit_job(session=s, spec=job(queue="nlp"), submitter="al")
        store.cancel_job(session=s, job_id=row.id, by="al")
        counts = store.count_by_phase(session=s)
        assert counts["Pending"] == 1 and counts["Cancelled"] == 1 and counts["Running"] == 0
        assert store.count_by_phase(session=s, queues=["nlp"])["Cancelled"] == 0
