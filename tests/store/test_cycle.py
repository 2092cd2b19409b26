"""The loop's side of the store: live jobs, placements, phases, reasons, inventory, lease,
and optimistic concurrency between two sessions."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta

import pytest
from storebuild import job, node, placement, queue

from scheduler.model import Enforcement, PendingReason, ReasonCode, RunningJob
from scheduler.spec import Phase
from scheduler.store import errors, schema
from scheduler.store.cluster import load_capacity, load_inventory, save_capacity, save_inventory
from scheduler.store.db import Database
from scheduler.store.events import append_event, list_events
from scheduler.store.jobs import cancel_job
from scheduler.store.lease import acquire_lease, database_now, lease_holder, release_lease
from scheduler.store.live import live_jobs
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement, set_pending_reason, set_phase

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def db(database: Database) -> Database:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision", priority=3))
    return database


def _submit(db: Database, **kw: object) -> str:
    with db.session() as s:
        return submit_job(session=s, spec=job(**kw), submitter="al", now=T0)[0].id


def test_live_jobs_convert_to_core_types(db: Database) -> None:
    jid = _submit(db, workers=2, gpu=0.5, gpuType=["H100"], maxRuntime=600, cpu="500m")
    with db.session() as s:
        [live] = live_jobs(session=s)
    r = live.request
    assert (r.id, r.queue, r.workers, r.gpu, r.gpu_types) == (jid, "vision", 2, 0.5, ("H100",))
    assert (r.cpu_milli, r.memory_mib, r.priority, r.max_runtime_s) == (500, 2048, 3, 600.0)
    assert r.submitted_at == T0.timestamp() and live.running() is None


def test_placement_then_phases_then_done(db: Database) -> None:
    jid = _submit(db, workers=2, gpu=0.5)
    ps = [placement(0, "n1", (0,), 0.5), placement(1, "n1", (0,), 0.5)]
    with db.session() as s:
        v = record_placement(
            session=s, job_id=jid, expected_version=1, placements=ps, attempt=1, now=T0
        )
        [live] = live_jobs(session=s)
        assert live.phase == Phase.SCHEDULED and live.placements == tuple(ps)
        running = live.running()
        assert isinstance(running, RunningJob) and running.started_at == T0.timestamp()
        later = T0 + timedelta(seconds=5)
        v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.RUNNING, now=later)
        assert live_jobs(session=s)[0].started_at == later
        v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.SUCCEEDED)
        row = get_job(session=s, job_id=jid)
        assert row.placements == [] and row.finished_at is not None and row.attempt == 1
        assert [c["type"] for c in row.conditions] == ["Scheduled", "Running", "Succeeded"]
        assert live_jobs(session=s) == []


def test_preempted_job_requeues_and_keeps_its_place(db: Database) -> None:
    jid = _submit(db)
    with db.session() as s:
        v = record_placement(
            session=s, job_id=jid, expected_version=1, placements=[placement()], attempt=1
        )
        v = set_phase(session=s, job_id=jid, expected_version=v, phase=Phase.RUNNING)
        v = set_phase(
            session=s, job_id=jid, expected_version=v, phase=Phase.PREEMPTED, reason="Reclaim"
        )
        v = set_phase(
            session=s, job_id=jid, expected_version=v, phase=Phase.PENDING, count_restart=True
        )
        [live] = live_jobs(session=s)
        assert live.phase == Phase.PENDING and live.placements == () and live.restarts == 1
        assert live.request.submitted_at == T0.timestamp()
        v = record_placement(
            session=s, job_id=jid, expected_version=v, placements=[placement()], attempt=2
        )
        assert live_jobs(session=s)[0].attempt == 2


@pytest.mark.parametrize(
    ("start", "to"),
    [
        pytest.param(Phase.PENDING, Phase.RUNNING, id="pending-to-running"),
        pytest.param(Phase.PENDING, Phase.SUCCEEDED, id="pending-to-succeeded"),
        pytest.param(Phase.FAILED, Phase.PENDING, id="failed-is-final"),
    ],
)
def test_invalid_transitions(db: Database, start: Phase, to: Phase) -> None:
    jid = _submit(db)
    with db.session() as s:
        v = 1
        if start is not Phase.PENDING:
            v = set_phase(session=s, job_id=jid, expected_version=1, phase=start)
        with pytest.raises(errors.InvalidTransition):
            set_phase(session=s, job_id=jid, expected_version=v, phase=to)


def test_record_placement_refuses_a_job_being_cancelled_or_not_pending(db: Database) -> None:
    jid = _submit(db)
    with db.session() as s:
        cancel_job(session=s, job_id=jid, by="al")
        with pytest.raises(errors.InvalidTransition):
            record_placement(
                session=s, job_id=jid, expected_version=2, placements=[placement()], attempt=1
            )


def test_two_sessions_racing_on_one_job_cannot_both_win(db: Database) -> None:
    jid = _submit(db)
    with db.session() as a, db.session() as b:
        [seen_a] = live_jobs(session=a)
        [seen_b] = live_jobs(session=b)
        assert seen_a.version == seen_b.version == 1
        record_placement(
            session=a, job_id=jid, expected_version=1, placements=[placement()], attempt=1
        )
        with pytest.raises((errors.VersionConflict, errors.InvalidTransition)):
            record_placement(
                session=b,
                job_id=jid,
                expected_version=1,
                placements=[placement(node="n2")],
                attempt=1,
            )
        # a stale version is refused even where the transition itself would be allowed
        with pytest.raises(errors.VersionConflict) as info:
            set_phase(session=b, job_id=jid, expected_version=1, phase=Phase.RUNNING)
        assert info.value.actual == 2
    with db.session() as s:
        assert get_job(session=s, job_id=jid).placements[0]["node"] == "n1"


def test_threads_racing_cancel_against_placement(db: Database) -> None:
    """A user's cancel and the loop's placement of the same job: exactly one applies."""
    for i in range(5):
        _race_cancel_against_placement(db, _submit(db, name=f"train-{i}"))


def _race_cancel_against_placement(db: Database, jid: str) -> None:
    results: list[str] = []
    barrier = threading.Barrier(2)

    def place() -> None:
        barrier.wait()
        with db.session() as s:
            try:
                record_placement(
                    session=s, job_id=jid, expected_version=1, placements=[placement()], attempt=1
                )
                results.append("placed")
            except errors.Conflict:
                results.append("lost")

    def cancel() -> None:
        barrier.wait()
        with db.session() as s:
            results.append(cancel_job(session=s, job_id=jid, by="al").phase)

    threads = [threading.Thread(target=place), threading.Thread(target=cancel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.session() as s:
        row = get_job(session=s, job_id=jid)
    if "placed" in results:  # cancel came second: only a request, for the loop
        assert row.phase == Phase.SCHEDULED and row.cancel_requested
    else:
        assert row.phase == Phase.CANCELLED and row.placements == []


def test_pending_reason_unchanged_writes_nothing(db: Database) -> None:
    jid = _submit(db)
    reason = PendingReason(ReasonCode.NO_NODE, "needs 8 GPUs on one node; largest is 4", {"n": 4})
    with db.session() as s:
        v = set_pending_reason(session=s, job_id=jid, reason=reason)
        assert v == 2
        assert set_pending_reason(session=s, job_id=jid, reason=reason) == 2
        row = get_job(session=s, job_id=jid)
        assert (row.pending_code, row.pending_details) == ("NoFittingNode", {"n": 4})
        v = record_placement(
            session=s, job_id=jid, expected_version=2, placements=[placement()], attempt=1
        )
        assert get_job(session=s, job_id=jid).pending_code is None


def test_append_event(db: Database) -> None:
    jid = _submit(db)
    with db.session() as s:
        append_event(session=s, job_id=jid, kind="Launched", data={"pods": 2})
        events = list_events(session=s, job_id=jid)
        assert [(e.kind, e.data) for e in events] == [("Submitted", {}), ("Launched", {"pods": 2})]
        with pytest.raises(errors.NotFound):
            append_event(session=s, job_id="nope", kind="X")


def test_save_inventory_replaces(db: Database) -> None:
    with db.session() as s:
        save_inventory(session=s, nodes=[node("a"), node("b", 4, "A100", 40960)])
        save_inventory(session=s, nodes=[node("b", 2, "A100", 40960), node("c")])
        assert load_inventory(session=s) == (node("b", 2, "A100", 40960), node("c"))


def test_inventory_keeps_how_a_node_shares_its_gpus(db: Database) -> None:
    mps = dataclasses.replace(node("m", 2), enforcement=Enforcement.MPS, slices=4)
    with db.session() as s:
        save_inventory(session=s, nodes=[node("a"), mps])
        assert load_inventory(session=s) == (node("a"), mps)
        save_inventory(session=s, nodes=[node("a"), dataclasses.replace(mps, slices=2)])
        assert load_inventory(session=s)[1].slices == 2  # a change is written


def test_inventory_keeps_why_a_node_offers_no_fractions(db: Database) -> None:
    off = dataclasses.replace(node("n", 8), no_sharing="GPU sharing is off on n: ...")
    with db.session() as s:
        save_inventory(session=s, nodes=[off])
        assert load_inventory(session=s) == (off,)
        save_inventory(session=s, nodes=[node("n", 8)])  # sharing back: written
        assert load_inventory(session=s) == (node("n", 8),)


def test_capacity_stands_apart_and_falls_back_to_the_inventory(db: Database) -> None:
    with db.session() as s:
        save_inventory(session=s, nodes=[node("a", 7)])
        assert load_capacity(session=s) == (node("a", 7),)  # none written yet
        save_capacity(session=s, nodes=[node("a", 8), node("b", 8)])
        assert load_capacity(session=s) == (node("a", 8), node("b", 8))
        assert load_inventory(session=s) == (node("a", 7),)


def test_lease_one_holder_at_a_time(db: Database) -> None:
    with db.session() as a, db.session() as b:
        assert acquire_lease(session=a, holder="x", ttl_s=600)
        assert not acquire_lease(session=b, holder="y", ttl_s=600)
        assert acquire_lease(session=a, holder="x", ttl_s=600)
        assert lease_holder(session=b) == "x"
        # A zero ttl has expired by the database's next reading of its clock.
        assert acquire_lease(session=a, holder="x", ttl_s=0)
        assert acquire_lease(session=b, holder="y", ttl_s=600)
        release_lease(session=a, holder="x")  # not x's any more: no effect
        assert lease_holder(session=a) == "y"
        release_lease(session=b, holder="y")
        assert lease_holder(session=a) is None
        assert acquire_lease(session=a, holder="x", ttl_s=600)


def test_lease_expiry_is_the_database_clock_plus_ttl(db: Database) -> None:
    with db.session() as s:
        before = database_now(session=s)
        assert acquire_lease(session=s, holder="x", ttl_s=600)
        after = database_now(session=s)
        row = s.get(schema.LeaseRow, 1, populate_existing=True)
        assert row is not None
        lo, hi = before + timedelta(seconds=600), after + timedelta(seconds=600)
        # SQLite's clock has millisecond resolution.
        assert lo - timedelta(milliseconds=1) <= row.expires_at <= hi + timedelta(milliseconds=1)


@pytest.mark.integration  # threads
def test_lease_threads_only_one_wins(db: Database) -> None:
    winners: list[str] = []
    barrier = threading.Barrier(4)

    def grab(holder: str) -> None:
        barrier.wait()
        with db.session() as s:
            if acquire_lease(session=s, holder=holder, ttl_s=600):
                winners.append(holder)

    threads = [threading.Thread(target=grab, args=(f"h{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
