"""A job's origin (the TrainingJob it was submitted as) lives in columns of its own:
stored by `submit_job`, read back as `Origin`, and filled in by migration 0004 for CR jobs
stored before it from the submitter/key strings they had."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from scheduler.spec import TRAININGJOB, JobSpec, Origin
from scheduler.spec.queue import QueueSpec
from scheduler.store import db as store_db
from scheduler.store import jobs, queues, rows, submission
from scheduler.store.db import Database

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def spec(name: str) -> JobSpec:
    return JobSpec(name=name, queue="vision", image="x:1", command=["true"], gpu=1)


def test_submit_keeps_the_origin_and_finds_live_jobs_by_it(database: Database) -> None:
    with database.session() as s:
        queues.create_queue(session=s, spec=QueueSpec(name="vision"))
        cr = Origin(TRAININGJOB, "shoal-jobs", "resnet", "uid-1")
        made, _ = submission.submit_job(
            session=s,
            spec=spec("resnet"),
            submitter="crd:shoal-jobs",
            idempotency_key="cr:uid-1",
            origin=cr,
        )
        rest, _ = submission.submit_job(session=s, spec=spec("bert"), submitter="alice")
        other_ns = Origin(TRAININGJOB, "elsewhere", "gpt", "uid-2")
        submission.submit_job(
            session=s, spec=spec("gpt"), submitter="crd:elsewhere", origin=other_ns
        )
    with database.session() as s:
        assert rows.get_job(session=s, job_id=made.id).origin == cr
        assert rows.get_job(session=s, job_id=rest.id).origin is None
        found = jobs.live_with_origin(session=s, kind=TRAININGJOB, namespaces=("shoal-jobs",))
        assert found == [(made.id, cr)]
        jobs.cancel_job(session=s, job_id=made.id, by="test")
        assert jobs.live_with_origin(session=s, kind=TRAININGJOB, namespaces=("shoal-jobs",)) == []


def _insert(conn: object, job_id: str, name: str, submitter: str, key: str | None) -> None:
    conn.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO jobs (id, name, queue, submitter, spec, priority, phase, conditions, "
            "placements, attempt, restarts, cancel_requested, created_at, idempotency_key, "
            "version) VALUES (:id, :name, 'vision', :submitter, '{}', 0, 'Pending', '[]', "
            "'[]', 0, 0, false, :at, :key, 1)"
        ),
        {"id": job_id, "name": name, "submitter": submitter, "key": key, "at": NOW},
    )


def test_migration_0004_fills_in_the_origin_of_older_cr_jobs(database_url: str) -> None:
    engine = store_db.make_engine(database_url)
    store_db.migrate(engine, "0003")
    with engine.begin() as conn:
        _insert(conn, "j-uid", "resnet", "crd:shoal-jobs", "cr:3f1c-uid")
        _insert(conn, "j-name", "bert", "crd:shoal-jobs", "cr:shoal-jobs/bert")  # no uid
        _insert(conn, "j-rest", "gpt", "alice", "cr:looks-like-one")  # not from a CR
        _insert(conn, "j-none", "t5", "crd:shoal-jobs", None)
    store_db.migrate(engine)
    engine.dispose()
    database = store_db.open_database(database_url)
    try:
        with database.session() as s:
            got = {j: rows.get_job(session=s, job_id=j).origin for j in ("j-uid", "j-name")}
            assert got == {
                "j-uid": Origin(TRAININGJOB, "shoal-jobs", "resnet", "3f1c-uid"),
                "j-name": Origin(TRAININGJOB, "shoal-jobs", "bert", ""),
            }
            assert rows.get_job(session=s, job_id="j-rest").origin is None
            assert rows.get_job(session=s, job_id="j-none").origin is None
    finally:
        database.close()
