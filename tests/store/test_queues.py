"""Queue repository on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from storebuild import job, queue

from scheduler import store
from scheduler.model import Quota
from scheduler.store import errors
from scheduler.store.db import Database


def test_create_get_list_and_core_conversion(database: Database) -> None:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("org", guaranteed={"total": 8, "H100": 4}))
        store.create_queue(
            session=s, spec=queue("vision", parent="org", guaranteed=2.5, limit=6, weight=2)
        )
        assert [q.name for q in store.list_queues(session=s)] == ["org", "vision"]
        assert store.get_queue(session=s, name="vision").parent == "org"
        core = {q.name: q for q in store.load_queues(session=s)}
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
        store.create_queue(session=s, spec=queue("vision"))
        with pytest.raises(error) as info:
            store.create_queue(session=s, spec=spec)  # type: ignore[arg-type]
        assert info.value.loc == loc
        assert len(store.list_queues(session=s)) == 1


def test_update_bumps_version_and_checks_it(database: Database) -> None:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("vision", guaranteed=1))
        row = store.update_queue(session=s, spec=queue("vision", guaranteed=3), expected_version=1)
        assert row.version == 2 and row.guaranteed["total"] == 3
        with pytest.raises(errors.Conflict):
            store.update_queue(session=s, spec=queue("vision", guaranteed=4), expected_version=1)


def test_update_refuses_a_parent_cycle(database: Database) -> None:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("a"))
        store.create_queue(session=s, spec=queue("b", parent="a"))
        with pytest.raises(errors.Conflict, match="cycle"):
            store.update_queue(session=s, spec=queue("a", parent="b"))


def test_delete_refused_with_live_jobs_or_children(database: Database) -> None:
    with database.session() as s:
        store.create_queue(session=s, spec=queue("org"))
        store.create_queue(session=s, spec=queue("vision", parent="org"))
        j, _ = store.submit_job(session=s, spec=job(queue="vision"), submitter="u")
        with pytest.raises(errors.Conflict, match="child queues: vision"):
            store.delete_queue(session=s, name="org")
        with pytest.raises(errors.Conflict, match="1 live job"):
            store.delete_queue(session=s, name="vision")
        store.cancel_job(session=s, job_id=j.id, by="u")
        store.delete_queue(session=s, name="vision")  # finished jobs keep their history
        store.delete_queue(session=s, name="org")
        assert store.list_queues(session=s) == []
        assert store.get_job(session=s, job_id=j.id).queue == "vision"
        with pytest.raises(errors.NotFound):
            store.delete_queue(session=s, name="org")
