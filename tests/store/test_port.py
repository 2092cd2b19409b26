"""`SqlLiveStore` is a `LiveStore`: mypy checks the assignment below against the protocol,
and one job goes through it from submission to Running on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storebuild import job, node, placement, queue

from scheduler.model import PendingReason, ReasonCode
from scheduler.spec import Phase
from scheduler.store import errors
from scheduler.store.changes import EventWrite, JobWrite, Move, NewAttempt, Waits
from scheduler.store.db import Database
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore, SqlLiveStore
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_job_goes_through_the_port(database: Database) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision"))
        jid = submit_job(session=s, spec=job(), submitter="al", now=T0)[0].id
        port: LiveStore = SqlLiveStore(s)  # mypy: the class satisfies the protocol
        port.save_inventory(nodes=[node("n1")], now=T0)
        assert [n.name for n in port.load_inventory()] == ["n1"]
        assert [q.name for q in port.load_queues()] == ["vision"]
        [live] = port.live_jobs()
        assert (live.id, live.phase, live.version) == (jid, Phase.PENDING, 1)
        waiting = PendingReason(ReasonCode.NO_NODE, "no room", {})
        [live] = port.write(writes=[JobWrite(live, Waits(waiting))], now=T0)
        assert isinstance(live, LiveJob) and live == port.live_jobs()[0]
        [placed] = port.write(writes=[JobWrite(live, NewAttempt((placement(),), 1))], now=T0)
        assert isinstance(placed, LiveJob)
        later = T0 + timedelta(seconds=1)
        [running] = port.write(writes=[JobWrite(placed, Move(Phase.RUNNING))], now=later)
        assert running == port.live_jobs()[0]
        assert (running.phase, running.version, running.attempt) == (Phase.RUNNING, 4, 1)
        [again] = port.write(writes=[JobWrite(placed, Move(Phase.SUCCEEDED))], now=later)
        assert isinstance(again, errors.VersionConflict)  # the version it was read at moved
        port.append_events(events=[EventWrite(jid, "Launched", message="by test")], now=later)
        kinds = [e.kind for e in port.list_events(job_id=jid)]
        assert kinds == ["Submitted", "Scheduled", "Running", "Launched"]
        assert port.ended(job_id=jid).phase is Phase.RUNNING  # what the orphan sweep reads
        assert port.acquire_lease(holder="a", ttl_s=30) and not port.acquire_lease(
            holder="b", ttl_s=30
        )
        port.release_lease(holder="a")
        assert port.acquire_lease(holder="b", ttl_s=30)
        assert port.deleted_among(job_ids=[jid, "gone"]) == {"gone"}
