"""The loop's port has two stores, SQL (`SqlLiveStore`) and memory (`MemoryStore`, the
simulator's): any sequence of the loop's writes (moves along the life cycle, new attempts,
resizes, reasons, each from the job as last read or from an older read) gets the same
answer from both (the job as written, or the same error) and leaves the same live jobs.
A property test: hypothesis draws the sequences."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storebuild import job, queue

from scheduler.model import PendingReason, ReasonCode, WorkerPlacement
from scheduler.spec import Phase
from scheduler.store.changes import Change, JobWrite, Move, NewAttempt, Resize, Waits
from scheduler.store.db import Database, open_database
from scheduler.store.live import LiveJob
from scheduler.store.memory import MemoryStore
from scheduler.store.port import LiveStore, SqlLiveStore
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = 3
ON = [
    (WorkerPlacement(0, "a", (0,)),),
    (WorkerPlacement(0, "a", (1,)), WorkerPlacement(1, "b", (0,), 0.5)),
]
REASONS = [
    PendingReason(ReasonCode.NO_NODE, "no room", {}),
    PendingReason(ReasonCode.NO_NODE, "no room", {"free": 1}),  # its details alone differ
    PendingReason(ReasonCode.QUEUE_LIMIT, "over the limit", {}),
]
changes = st.one_of(
    st.builds(Move, st.sampled_from(list(Phase)), st.just("R"), st.just("m"), st.booleans()),
    st.builds(NewAttempt, st.sampled_from(ON), st.integers(1, 3)),
    st.builds(Resize, st.sampled_from(ON), st.just("grow")),
    st.builds(Waits, st.sampled_from(REASONS)),
)
steps = st.lists(
    st.tuples(st.integers(0, JOBS - 1), changes, st.booleans()), min_size=1, max_size=12
)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database at the newest revision with a queue and the jobs, made once."""
    path = tmp_path_factory.mktemp("template") / "s.db"
    db = open_database(f"sqlite:///{path}")
    with db.session() as s:
        create_queue(session=s, spec=queue("vision"))
        for i in range(JOBS):
            submit_job(session=s, spec=job(name=f"j{i}"), submitter="al", now=T0, job_id=f"j{i}")
    db.close()
    return path


def _memory() -> MemoryStore:
    mem = MemoryStore()
    mem.add_queue(queue("vision"))
    for i in range(JOBS):
        mem.submit(job(name=f"j{i}"), job_id=f"j{i}", now=T0, by="al")
    return mem


def _seen(lj: LiveJob) -> tuple[object, ...]:
    """What the loop reads of a job (its spec aside: the SQL store parses it back)."""
    return (lj.id, lj.version, lj.phase, lj.placements, lj.attempt, lj.restarts,
            lj.cancel_requested, lj.scheduled_at, lj.started_at, lj.resized_at,
            lj.request)  # fmt: skip


def _answer(result: LiveJob | Exception, change: Change) -> object:
    if isinstance(result, Exception):
        return type(result)
    # A reason the SQL store wrote at another version than read gives the job back as
    # read (the loop reads it again); the memory store gives it as written: the live
    # jobs, compared below, agree.
    return _seen(result)[:1] + _seen(result)[2:] if isinstance(change, Waits) else _seen(result)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps)
def test_both_stores_answer_every_write_alike(
    steps: list[tuple[int, Change, bool]], migrated: Path, tmp_path: Path
) -> None:
    copy = tmp_path / f"{abs(hash(tuple(map(repr, steps))))}.db"
    shutil.copyfile(migrated, copy)
    db: Database = open_database(f"sqlite:///{copy}")
    mem = _memory()
    try:
        with db.session() as s:
            sql: LiveStore = SqlLiveStore(s)
            stores: list[LiveStore] = [sql, mem]
            read = [{lj.id: lj for lj in p.live_jobs()} for p in stores]
            older = [dict(r) for r in read]
            for n, (i, change, stale) in enumerate(steps):
                job_id, at = f"j{i}", T0 + timedelta(seconds=n + 1)
                answers = []
                for p, now_read, before in zip(stores, read, older, strict=True):
                    lj = (before if stale else now_read).get(job_id)
                    if lj is None:  # no longer live: nothing the loop would write
                        answers.append(None)
                        continue
                    [result] = p.write(writes=[JobWrite(lj, change)], now=at)
                    answers.append(_answer(result, change))
                assert answers[0] == answers[1], (n, change, answers)
                for k, p in enumerate(stores):
                    older[k] = read[k]
                    read[k] = {lj.id: lj for lj in p.live_jobs()}
                assert [_seen(lj) for lj in read[0].values()] == [
                    _seen(lj) for lj in read[1].values()
                ]
    finally:
        db.close()
