"""Many jobs' writes in one transaction (`store.batches.write`, the loop's `enact`): each
job ends as the one-job function leaves it and is given back as its row now reads; a
job that moved on gets its error, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from storebuild import job, queue

from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store import batches, changes, errors, events, schema, transitions
from scheduler.store.db import Database, Session
from scheduler.store.jobs import cancel_job
from scheduler.store.live import LiveJob, live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
ON_A = (WorkerPlacement(0, "a", (0,)), WorkerPlacement(1, "b", (1, 2), 1.0))


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision"))
    return database


def _jobs(db: Database, n: int, prefix: str = "j") -> list[str]:
    with db.session() as s:
        return [
            submit_job(session=s, spec=job(name=f"{prefix}{i}"), submitter="al", now=T0)[0].id
            for i in range(n)
        ]


def _seen(db: Database, job_id: str) -> tuple[object, ...]:
    """A job's row and events, as far as writes make them (ids and times aside)."""
    with db.session() as s:
        r = get_job(session=s, job_id=job_id)
        history = events.list_events(session=s, job_id=job_id)
        said = [(e.kind, e.reason, e.message, e.data) for e in history]
        conditions = [(c["type"], c["reason"], c["message"]) for c in r.conditions]
        return (r.version, r.phase, r.placements, r.attempt, conditions, r.scheduled_at,
                r.started_at, r.finished_at, said)  # fmt: skip


def _live(s: Session, ids: list[str]) -> list[LiveJob]:
    by_id = {lj.id: lj for lj in live_jobs(session=s)}
    return [by_id[j] for j in ids]


def _all_written(results: list[changes.Result]) -> list[LiveJob]:
    assert all(isinstance(r, LiveJob) for r in results), results
    return [r for r in results if isinstance(r, LiveJob)]


def test_placements_and_phases_as_one_job_writes_leave_them(db: Database) -> None:
    one, many = _jobs(db, 3, "one"), _jobs(db, 3, "many")
    phases = [Phase.RUNNING, Phase.SUCCEEDED, Phase.RUNNING]
    with db.session() as s:
        for j in one:
            transitions.record_placement(session=s, job_id=j, expected_version=1,
                                         placements=ON_A, attempt=1, now=T1)  # fmt: skip
        for j, phase in zip(one, phases, strict=True):
            transitions.set_phase(session=s, job_id=j, expected_version=2, phase=phase,
                                  reason="R", message="m", now=T1)  # fmt: skip
        placed = _all_written(batches.write(
            session=s,
            writes=[changes.JobWrite(lj, changes.NewAttempt(ON_A, 1)) for lj in _live(s, many)],
            now=T1,
        ))  # fmt: skip
        assert [(lj.id, lj.version, lj.phase, lj.attempt, lj.placements) for lj in placed] == [
            (j, 2, Phase.SCHEDULED, 1, ON_A) for j in many
        ]
        moves = [
            changes.JobWrite(lj, changes.Move(phase, "R", "m"))
            for lj, phase in zip(placed, phases, strict=True)
        ]
        moved = _all_written(batches.write(session=s, writes=moves, now=T1))
        assert [(lj.id, lj.version, lj.phase) for lj in moved] == [
            (j, 3, phase) for j, phase in zip(many, phases, strict=True)
        ]
    for a, b in zip(one, many, strict=True):
        assert _seen(db, a) == _seen(db, b)
    with db.session() as s:  # the jobs given back are the rows as they now read
        running = [lj for lj in moved if lj.phase is Phase.RUNNING]
        assert running == _live(s, [lj.id for lj in running])


def test_a_job_that_moved_on_is_left_out_and_the_others_written(db: Database) -> None:
    moved, cancelled, fine, gone = _jobs(db, 4)
    with db.session() as s:
        read = _live(s, [moved, cancelled, fine, gone])
        cancel_job(session=s, job_id=cancelled, by="al")  # Pending: Cancelled at once
        s.execute(schema.JobRow.__table__.update().where(schema.JobRow.id == moved)
                  .values(version=5))  # fmt: skip
        s.execute(schema.JobRow.__table__.delete().where(schema.JobRow.id == gone))
        s.commit()
        writes = [changes.JobWrite(lj, changes.NewAttempt(ON_A, 1)) for lj in read]
        results = batches.write(session=s, writes=writes, now=T1)
        assert [type(r) for r in results] == [
            errors.VersionConflict, errors.InvalidTransition, LiveJob, errors.NotFound
        ]  # fmt: skip
        placed = results[2]
        assert isinstance(placed, LiveJob)
        # Scheduled -> Scheduled is no move; at the wrong version, nothing either.
        bad = [
            changes.JobWrite(placed, changes.Move(Phase.SCHEDULED)),
            changes.JobWrite(read[2], changes.Move(Phase.RUNNING)),
        ]
        assert [type(r) for r in batches.write(session=s, writes=bad, now=T1)] == [
            errors.InvalidTransition, errors.VersionConflict
        ]  # fmt: skip
    with db.session() as s:
        assert get_job(session=s, job_id=moved).phase == Phase.PENDING.value
        assert get_job(session=s, job_id=fine).phase == Phase.SCHEDULED.value
        assert get_job(session=s, job_id=fine).version == 2


def test_events_of_many_jobs_and_of_one_deleted_meanwhile(db: Database) -> None:
    a, b = _jobs(db, 2)
    said = [changes.EventWrite(j, "Launched", "Launched", f"attempt 1 of {j}", {"attempt": 1})
            for j in (a, b, "deleted-job")]  # fmt: skip
    with db.session() as s:
        batches.append_events(session=s, events=said, now=T1)
        for j in (a, b):
            kinds = [(e.kind, e.message, e.data) for e in events.list_events(session=s, job_id=j)]
            assert kinds[-1] == ("Launched", f"attempt 1 of {j}", {"attempt": 1})
