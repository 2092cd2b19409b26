"""An elastic job's resize in the store (`scheduler.store.resizes`): the new placements,
`resized_at` and a `Resized` event in one compare-and-set; its size history; and the
last resizes a TrainingJob's status shows (`crstatus.resizes`). On SQLite and on
PostgreSQL (the `database` fixture)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session
from storebuild import job, placement, queue

from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store import crstatus, errors, resizes
from scheduler.store.db import Database
from scheduler.store.events import list_events
from scheduler.store.jobs import cancel_job
from scheduler.store.live import live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement, set_phase

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _places(n: int) -> list[WorkerPlacement]:
    return [placement(w, "n1", (w,)) for w in range(n)]


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision"))
    return database


def _running(db: Database, size: int = 2) -> tuple[str, int]:
    """An elastic job (1..8) Running at `size` workers: its id and version."""
    with db.session() as s:
        row, _ = submit_job(
            session=s, spec=job(workers={"min": 1, "max": 8}, gpu=1), submitter="al", now=T0
        )
        v = record_placement(
            session=s, job_id=row.id, expected_version=row.version,
            placements=_places(size), attempt=1, now=T0,
        )  # fmt: skip
        v = set_phase(session=s, job_id=row.id, expected_version=v, phase=Phase.RUNNING, now=_at(1))
    return row.id, v


def _resize(db: Database, jid: str, version: int, size: int, t: float, why: str = "why") -> int:
    with db.session() as s:
        return resizes.record_resize(
            session=s, job_id=jid, expected_version=version, placements=_places(size),
            reason=why, now=_at(t),
        )  # fmt: skip


def test_a_resize_writes_placements_resized_at_and_an_event(db: Database) -> None:
    jid, v = _running(db, 2)
    v2 = _resize(db, jid, v, 4, 10, "grown into idle GPUs")
    assert v2 == v + 1
    with db.session() as s:
        row = get_job(session=s, job_id=jid)
        assert row.version == v2 and row.phase == Phase.RUNNING.value and row.attempt == 1
        assert row.resized_at is not None and row.resized_at.astimezone(UTC) == _at(10)
        assert [int(p["worker"]) for p in row.placements] == [0, 1, 2, 3]
        [live] = live_jobs(session=s)
        assert live.placements == tuple(_places(4)) and live.version == v2
        assert live.resized_at is not None and live.resized_at.astimezone(UTC) == _at(10)
        events = [e for e in list_events(session=s, job_id=jid) if e.kind == "Resized"]
    [e] = events
    assert e.message == "2 -> 4 workers: grown into idle GPUs"
    assert e.at.astimezone(UTC) == _at(10)
    assert {k: e.data[k] for k in ("attempt", "from", "to", "added", "removed")} == {
        "attempt": 1,
        "from": 2,
        "to": 4,
        "added": [2, 3],
        "removed": [],
    }
    assert [int(p["worker"]) for p in e.data["placements"]] == [0, 1, 2, 3]


def test_a_shrink_names_the_workers_removed(db: Database) -> None:
    jid, v = _running(db, 4)
    _resize(db, jid, v, 1, 10, "reclaimed")
    with db.session() as s:
        [e] = resizes.history(session=s, job_id=jid)
        assert [int(p["worker"]) for p in get_job(session=s, job_id=jid).placements] == [0]
    said = (e.data["from"], e.data["to"], e.data["added"], e.data["removed"])
    assert said == (4, 1, [], [1, 2, 3])
    assert e.message == "4 -> 1 workers: reclaimed"


def test_a_stale_version_is_refused_and_writes_nothing(db: Database) -> None:
    jid, v = _running(db, 2)
    _resize(db, jid, v, 3, 10)
    with pytest.raises(errors.VersionConflict):
        _resize(db, jid, v, 4, 20)  # the version before the first resize
    with db.session() as s:
        row = get_job(session=s, job_id=jid)
        assert len(row.placements) == 3 and row.version == v + 1
        assert row.resized_at is not None and row.resized_at.astimezone(UTC) == _at(10)
        assert len(resizes.history(session=s, job_id=jid)) == 1


@pytest.mark.parametrize("phase", ["Scheduled", "Pending", "Succeeded", "cancelling"])
def test_a_job_not_running_is_refused_and_left_as_it_is(db: Database, phase: str) -> None:
    with db.session() as s:
        row, _ = submit_job(
            session=s, spec=job(workers={"min": 1, "max": 8}, gpu=1), submitter="al", now=T0
        )
        jid, v = row.id, row.version
        if phase != "Pending":
            v = record_placement(
                session=s, job_id=jid, expected_version=v, placements=_places(2), attempt=1
            )
        if phase in ("Succeeded", "cancelling"):
            v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.RUNNING)
        if phase == "Succeeded":
            v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.SUCCEEDED)
        if phase == "cancelling":  # Running, but a cancel was asked for: no resize
            v = cancel_job(session=s, job_id=jid, by="al").version
        before = get_job(session=s, job_id=jid)
        placements_before = list(before.placements)
    with pytest.raises(errors.InvalidTransition):
        _resize(db, jid, v, 4, 10)  # the current version: refused for its phase alone
    with db.session() as s:
        row = get_job(session=s, job_id=jid)
        assert row.version == v and list(row.placements) == placements_before
        assert row.resized_at is None and resizes.history(session=s, job_id=jid) == []


def test_an_unknown_job_is_not_found(db: Database) -> None:
    with pytest.raises(errors.NotFound):
        _resize(db, "nope", 1, 2, 10)


@pytest.mark.parametrize("back", [Phase.PENDING, Phase.PREEMPTED])
def test_leaving_running_for_the_queue_clears_resized_at(db: Database, back: Phase) -> None:
    jid, v = _running(db, 2)
    v = _resize(db, jid, v, 4, 10)
    with db.session() as s:
        v = set_phase(session=s, job_id=jid, expected_version=v, phase=back, now=_at(20))
        row = get_job(session=s, job_id=jid)
        assert row.resized_at is None and list(row.placements) == []
        if back is Phase.PREEMPTED:
            v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.PENDING)
        # The next attempt starts from its own size, never resized yet.
        v = record_placement(
            session=s, job_id=jid, expected_version=v, placements=_places(1), attempt=2
        )
        [live] = live_jobs(session=s)
        assert live.resized_at is None and live.attempt == 2
        # The history keeps the earlier attempt's resize.
        assert [e.data["attempt"] for e in resizes.history(session=s, job_id=jid)] == [1]


def test_history_is_oldest_first_and_the_status_shows_the_last_ten(db: Database) -> None:
    jid, v = _running(db, 1)
    sizes = [2 + i % 7 for i in range(12)]  # 2, 3, ..., 8, 2, ...: each a change
    for i, n in enumerate(sizes):
        v = _resize(db, jid, v, n, 10 * (i + 1), f"step {i}")
    with db.session() as s:
        got = resizes.history(session=s, job_id=jid)
        shown = crstatus.resizes(session=s, job_id=jid)
        assert crstatus.resizes(session=s, job_id=jid, last=3) == shown[-3:]
        other, _ = _running_other(s)
        assert crstatus.resizes(session=s, job_id=other) == []
    assert [e.message.split(": ")[1] for e in got] == [f"step {i}" for i in range(12)]
    steps = [(1, sizes[0]), *itertools.pairwise(sizes)]
    assert [(e.data["from"], e.data["to"]) for e in got] == steps
    assert len(shown) == 10
    assert [(r["from"], r["to"]) for r in shown] == steps[-10:]
    assert [r["message"] for r in shown] == [e.message for e in got[-10:]]
    assert {r["attempt"] for r in shown} == {1}
    assert [r["at"] for r in shown] == [
        _at(10 * (i + 1)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(2, 12)
    ]


def _running_other(s: Session) -> tuple[str, int]:
    row, _ = submit_job(session=s, spec=job("other", gpu=1), submitter="al", now=T0)
    return row.id, row.version
