"""Store fixtures: every test that takes `database` runs on SQLite and on PostgreSQL.

PostgreSQL comes from SHOAL_TEST_PG_URL (scripts/postgres.sh starts one; scripts/test.sh
does that for CI). Without it the postgres cases skip, saying why, unless SHOAL_REQUIRE_PG
is set; with it, an unreachable server fails the tests rather than skipping them. Each
PostgreSQL test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from scheduler.store.db import Database, open_database


def pg_url_or_skip() -> str:
    url = os.environ.get("SHOAL_TEST_PG_URL")
    if not url:
        if os.environ.get("SHOAL_REQUIRE_PG"):
            pytest.fail("SHOAL_REQUIRE_PG is set but SHOAL_TEST_PG_URL is not")
        pytest.skip('no PostgreSQL: set SHOAL_TEST_PG_URL (eval "$(scripts/postgres.sh start)")')
    return url


def pg_schema_url(tmp_name: str) -> Iterator[str]:
    """A fresh schema on the test server; yields a URL whose search_path is that schema."""
    url = pg_url_or_skip()
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{tmp_name}"'))
    except Exception as exc:  # unreachable server: a failure, never a skip
        admin.dispose()
        pytest.fail(f"SHOAL_TEST_PG_URL={url} is set but unusable: {exc}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{tmp_name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{tmp_name}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shoal.db'}"
    else:
        yield from pg_schema_url(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = open_database(database_url)
    yield db
    db.close()
