"""Start-time estimates (issue 29): the estimator replaces the set, readers get one job's
or a page's; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.store import estimates
from scheduler.store.db import Database

NOW = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)


def est(
    job: str, position: int, start: datetime | None, unknown: str = ""
) -> estimates.StartEstimate:
    return estimates.StartEstimate(job, start, position, "maxRuntime of j0", unknown, NOW)


def test_a_new_set_replaces_the_old(database: Database) -> None:
    first = [est("a", 1, NOW), est("b", 2, NOW + timedelta(hours=2))]
    with database.session() as s:
        estimates.replace_all(session=s, estimates=first)
        assert estimates.of(session=s, job_id="b") == first[1]
        assert estimates.of_many(session=s, job_ids=["a", "b", "zz"]) == {
            "a": first[0],
            "b": first[1],
        }
    second = [est("b", 1, None, "waits for j7, whose runtime is not known")]
    with database.session() as s:
        estimates.replace_all(session=s, estimates=second)
        assert estimates.of(session=s, job_id="a") is None  # started or gone: no row
        got = estimates.of(session=s, job_id="b")
        assert got is not None and got.start_at is None and "not known" in got.unknown
