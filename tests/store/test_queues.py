"""Queue repository on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from storebuild import job, queue

from scheduler.model import Quota
from scheduler.store import errors
from scheduler.store.cluster import load_queues
from scheduler.store.db import Database
from scheduler.store.jobs import cancel_job
from scheduler.store.queues import create_queue, delete_queue, get_queue, list_queues, update_queue
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job


def test_create_get_list_and_core_conversion(database: Database) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("org", guaranteed={"total": 8, "H100": 4}))
        create_queue(
            session=s, spec=queue("vision", parent="org", guaranteed=2.5, limit=6, weight=2)
        )
        assert [q.name for q in list_queues(session=s)] == ["org", "vision"]
        assert get_queue(session=s, name="vision").parent == "org"
        core = {q.name: q for q in load_queues(session=s)}
    assert core["org"].guaranteed == Quota(total=8.0, by_model={"H100": 4.0})
    assert core["org"].limit.total is None  # no limit: unlimited
    assert core["vision"].limit == Quota(total=6.0)
    assert core["vision"].weight == 2.0 and core["vision"].parent == "org"


@pytest.mark.parametrize(
    ("spec", "error", "loc"),
    [
        pytest.param(queue("vision"), errors.Conflict, ("name",), id="duplicate"),
        pytest.param(queue("x", parent="nope"), errors.NotFound, ("parent",), id="no-parent"),
    ],
)
def test_create_refused(database: Database, spec: object, error: type, loc: tuple[str]) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision"))
        with pytest.raises(error) as info:
            create_queue(session=s, spec=spec)  # type: ignore[arg-type]
        assert info.value.loc == loc
        assert len(list_queues(session=s)) == 1


def test_update_bumps_version_and_checks_it(database: Database) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("vision", guaranteed=1))
        row = update_queue(session=s, spec=queue("vision", guaranteed=3), expected_version=1)
        assert row.version == 2 and row.guaranteed["total"] == 3
        with pytest.raises(errors.Conflict):
            update_queue(session=s, spec=queue("vision", guaranteed=4), expected_version=1)


def test_update_refuses_a_parent_cycle(database: Database) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("a"))
        create_queue(session=s, spec=queue("b", parent="a"))
        with pytest.raises(errors.Conflict, match="cycle"):
            update_queue(session=s, spec=queue("a", parent="b"))


def test_delete_refused_with_live_jobs_or_children(database: Database) -> None:
    with database.session() as s:
        create_queue(session=s, spec=queue("org"))
        create_queue(session=s, spec=queue("vision", parent="org"))
        j, _ = submit_job(session=s, spec=job(queue="vision"), submitter="u")
        with pytest.raises(errors.Conflict, match="child queues: vision"):
            delete_queue(session=s, name="org")
        with pytest.raises(errors.Conflict, match="1 live job"):
            delete_queue(session=s, name="vision")
        cancel_job(session=s, job_id=j.id, by="u")
        delete_queue(session=s, name="vision")  # finished jobs keep their history
        delete_queue(session=s, name="org")
        assert list_queues(session=s) == []
        assert get_job(session=s, job_id=j.id).queue == "vision"
        with pytest.raises(errors.NotFound):
            delete_queue(session=s, name="org")
