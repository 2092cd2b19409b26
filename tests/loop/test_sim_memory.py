"""`shoal simulate` runs on the in-memory store (`store.memory`): the loop's port with the
store's own rules (`store.changes`) and no database. A replay on it decides exactly what
a replay on SQLite decides: every placement with its GPUs, preemption and end, at the
same virtual times, with the same summary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler import model
from scheduler.backends.local import cluster
from scheduler.sim import replay
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import errors
from scheduler.store.changes import JobWrite, Move, NewAttempt, Waits
from scheduler.store.live import LiveJob
from scheduler.store.memory import MemoryStore
from scheduler.store.port import LiveStore, opened

from .test_sim_fast import _trace


def test_a_replay_in_memory_decides_what_one_on_sqlite_decides(tmp_path: Path) -> None:
    jobs, nodes = _trace(tmp_path), cluster.load_nodes()
    config = model.Config(min_runtime_s=150.0, starvation_s=400.0)
    memory = replay.simulate(jobs, nodes, config=config)
    sqlite = replay.simulate(
        jobs, nodes, config=config, database_url=f"sqlite:///{tmp_path / 'sim.db'}"
    )
    assert sum(memory.preemptions.values()) > 0 and memory.decisions
    assert memory.decisions == sqlite.decisions  # places (with GPUs), preemptions, ends
    assert (memory.cycles, memory.end, memory.delays, memory.placed, memory.finished) == (
        sqlite.cycles, sqlite.end, sqlite.delays, sqlite.placed, sqlite.finished
    )  # fmt: skip
    assert memory.utilisation == sqlite.utilisation


NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
ON_A = (model.WorkerPlacement(0, "a", (0,)),)


def _store() -> tuple[MemoryStore, LiveJob]:
    mem = MemoryStore()
    mem.add_queue(QueueSpec.model_validate({"name": "q", "priority": 3}))
    spec = JobSpec.model_validate({"name": "j", "queue": "q", "image": "x", "gpu": 1})
    return mem, mem.submit(spec, job_id="j1", now=datetime(2026, 1, 1, tzinfo=UTC))


def test_the_port_in_memory_keeps_the_stores_rules() -> None:
    mem, job = _store()
    with opened(mem) as port:  # a `LiveStore`, as the loop opens it
        assert port is mem
        checked: LiveStore = mem
        assert job.request.priority == 3  # its queue's
        [placed] = checked.write(writes=[JobWrite(job, NewAttempt(ON_A, 1))], now=NOW)
        assert isinstance(placed, LiveJob) and placed.phase is Phase.SCHEDULED
        assert (placed.version, placed.attempt, placed.placements) == (2, 1, ON_A)
        # At the version read before: moved on; a move the phase does not allow: refused.
        [late] = checked.write(writes=[JobWrite(job, Move(Phase.RUNNING))], now=NOW)
        assert isinstance(late, errors.VersionConflict)
        [bad] = checked.write(writes=[JobWrite(placed, Waits(_reason()))], now=NOW)
        assert isinstance(bad, errors.InvalidTransition)
        [back] = checked.write(
            writes=[JobWrite(placed, Move(Phase.PENDING, "Requeued", count_restart=True))],
            now=NOW,
        )
        assert isinstance(back, LiveJob)
        assert (back.phase, back.placements, back.restarts, back.scheduled_at) == (
            Phase.PENDING, (), 1, None
        )  # fmt: skip
        [waits] = checked.write(writes=[JobWrite(back, Waits(_reason()))], now=NOW)
        [again] = checked.write(writes=[JobWrite(back, Waits(_reason()))], now=NOW)
        assert isinstance(waits, LiveJob) and waits.version == back.version + 1
        assert again == waits  # the same reason again is no write
        [done] = checked.write(writes=[JobWrite(waits, Move(Phase.CANCELLED))], now=NOW)
        assert isinstance(done, LiveJob) and checked.live_jobs() == []
        assert checked.ended(job_id=job.id).phase is Phase.CANCELLED
        kinds = [e.kind for e in checked.list_events(job_id=job.id)]
        assert kinds == ["Submitted", "Scheduled", "Pending", "Cancelled"]
        with pytest.raises(errors.NotFound):
            checked.ended(job_id="no-such-job")


def _reason() -> model.PendingReason:
    return model.PendingReason(model.ReasonCode.NO_NODE, "no room", {})
