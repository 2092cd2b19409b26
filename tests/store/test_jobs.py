"""Job repository: submission, idempotency, listing, cancel, events."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.exc import IntegrityError
from storebuild import job, placement, queue

from scheduler.spec import Phase
from scheduler.store import errors, schema
from scheduler.store.db import Database
from scheduler.store.events import list_events
from scheduler.store.jobs import cancel_job, count_by_phase, list_jobs
from scheduler.store.live import live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement, set_phase


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision", priority=5))
        create_queue(session=s, spec=queue("nlp"))
    return database


def test_submit_stores_a_pending_job_with_the_queue_priority(db: Database) -> None:
    with db.session() as s:
        row, created = submit_job(session=s, spec=job(gpu=0.5, workers=2), submitter="al")
    assert created and row.phase == Phase.PENDING and row.priority == 5 and row.version == 1
    with db.session() as s:
        again = get_job(session=s, job_id=row.id)
        assert again.spec["gpu"] == 0.5 and again.created_at.tzinfo is not None
        assert [e.kind for e in list_events(session=s, job_id=row.id)] == ["Submitted"]


def test_unknown_queue_is_refused_and_stores_nothing(db: Database) -> None:
    with db.session() as s:
        with pytest.raises(errors.NotFound) as info:
            submit_job(session=s, spec=job(queue="nope"), submitter="al")
        assert info.value.loc == ("queue",)
        assert list_jobs(session=s).items == []


def test_idempotency_key(db: Database) -> None:
    with db.session() as s:
        a, created_a = submit_job(session=s, spec=job(), submitter="al", idempotency_key="k")
        b, created_b = submit_job(session=s, spec=job(), submitter="al", idempotency_key="k")
        assert (created_a, created_b) == (True, False) and a.id == b.id
        with pytest.raises(errors.IdempotencyMismatch):
            submit_job(session=s, spec=job(workers=2), submitter="al", idempotency_key="k")
        # keys are per submitter (names per queue: another live "train" would be refused)
        c, created_c = submit_job(
            session=s, spec=job("train-2"), submitter="bo", idempotency_key="k"
        )
        assert created_c and c.id != a.id
        assert len(list_jobs(session=s).items) == 2


def test_a_name_is_unique_among_a_queue_s_live_jobs(db: Database) -> None:
    with db.session() as s:
        first, _ = submit_job(session=s, spec=job("train"), submitter="al")
        with pytest.raises(errors.Conflict) as info:
            submit_job(session=s, spec=job("train"), submitter="bo")
        assert info.value.loc == ("name",) and first.id in info.value.message
        other, _ = submit_job(session=s, spec=job("train", queue="nlp"), submitter="bo")
        cancel_job(session=s, job_id=first.id, by="al")
        again, created = submit_job(session=s, spec=job("train"), submitter="bo")
        assert created and len({first.id, other.id, again.id}) == 3
        names = [(j.queue, j.name, j.phase) for j in list_jobs(session=s).items]
        assert sorted(names) == [
            ("nlp", "train", "Pending"),
            ("vision", "train", "Cancelled"),
            ("vision", "train", "Pending"),
        ]


def test_the_database_itself_refuses_a_second_live_job_of_a_name(db: Database) -> None:
    """The index, not only the check before the insert: what two racing submissions meet."""
    with db.session() as s:
        first, _ = submit_job(session=s, spec=job("train"), submitter="al")
        twin = schema.JobRow(
            **{
                c.key: getattr(first, c.key)
                for c in schema.JobRow.__table__.columns
                if c.key != "seq"
            }
        )
        twin.id, twin.idempotency_key = "twin", None
        s.add(twin)
        with pytest.raises(IntegrityError):
            s.flush()
        s.rollback()
        assert [j.id for j in list_jobs(session=s).items] == [first.id]


def test_racing_submissions_of_one_name_leave_one_live_job(db: Database) -> None:
    start = threading.Barrier(6)

    def submit(i: int) -> str:
        start.wait(timeout=120)
        with db.session() as s:
            try:
                submit_job(session=s, spec=job("train"), submitter=f"u{i}")
                return "created"
            except errors.Conflict:
                return "conflict"

    with ThreadPoolExecutor(6) as pool:
        results = sorted(pool.map(submit, range(6)))
    assert results == ["conflict"] * 5 + ["created"]
    with db.session() as s:
        assert len(list_jobs(session=s).items) == 1


def test_list_filters_and_cursor_pagination_newest_first(db: Database) -> None:
    with db.session() as s:
        ids = [
            submit_job(
                session=s, spec=job(f"j{i}", queue="vision" if i % 2 else "nlp"), submitter="al"
            )[0].id
            for i in range(7)
        ]
        seen, cursor = [], None
        while True:
            page = list_jobs(session=s, limit=3, cursor=cursor)
            seen += [j.id for j in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == ids[::-1]
        vision = list_jobs(session=s, queue="vision").items
        assert [j.name for j in vision] == ["j5", "j3", "j1"]
        assert list_jobs(session=s, queues=["nlp"], queue="vision").items == []
        assert list_jobs(session=s, submitter="bo").items == []
        assert len(list_jobs(session=s, phase=Phase.PENDING).items) == 7
        with pytest.raises(errors.Invalid):
            list_jobs(session=s, cursor="garbage!")


def test_get_hides_jobs_outside_visible_queues(db: Database) -> None:
    with db.session() as s:
        row, _ = submit_job(session=s, spec=job(queue="nlp"), submitter="al")
        with pytest.raises(errors.NotFound):
            get_job(session=s, job_id=row.id, queues=["vision"])
        with pytest.raises(errors.NotFound):
            cancel_job(session=s, job_id=row.id, by="x", queues=["vision"])


def test_cancel_pending_is_immediate_and_idempotent(db: Database) -> None:
    with db.session() as s:
        row, _ = submit_job(session=s, spec=job(), submitter="al")
        done = cancel_job(session=s, job_id=row.id, by="al")
        assert done.phase == Phase.CANCELLED and done.finished_at is not None
        assert cancel_job(session=s, job_id=row.id, by="al").version == done.version


def test_cancel_running_is_a_request_for_the_loop(db: Database) -> None:
    with db.session() as s:
        row, _ = submit_job(session=s, spec=job(), submitter="al")
        v = record_placement(
            session=s, job_id=row.id, expected_version=1, placements=[placement()], attempt=1
        )
        set_phase(session=s, job_id=row.id, expected_version=v, phase=Phase.RUNNING)
        asked = cancel_job(session=s, job_id=row.id, by="al")
        assert asked.phase == Phase.RUNNING and asked.cancel_requested
        live = live_jobs(session=s)[0]
        assert live.cancel_requested
        set_phase(session=s, job_id=row.id, expected_version=live.version, phase=Phase.CANCELLED)
        kinds = [e.kind for e in list_events(session=s, job_id=row.id)]
        assert kinds == ["Submitted", "Scheduled", "Running", "CancelRequested", "Cancelled"]


def test_cancel_of_a_finished_job_conflicts(db: Database) -> None:
    with db.session() as s:
        row, _ = submit_job(session=s, spec=job(), submitter="al")
        set_phase(session=s, job_id=row.id, expected_version=1, phase=Phase.FAILED)
        with pytest.raises(errors.Conflict, match="already Failed"):
            cancel_job(session=s, job_id=row.id, by="al")


def test_count_by_phase(db: Database) -> None:
    with db.session() as s:
        row, _ = submit_job(session=s, spec=job(), submitter="al")
        submit_job(session=s, spec=job(queue="nlp"), submitter="al")
        cancel_job(session=s, job_id=row.id, by="al")
        counts = count_by_phase(session=s)
        assert counts["Pending"] == 1 and counts["Cancelled"] == 1 and counts["Running"] == 0
        assert count_by_phase(session=s, queues=["nlp"])["Cancelled"] == 0
