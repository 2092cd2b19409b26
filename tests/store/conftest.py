"""Store fixtures: every test that takes `database` runs on SQLite and on PostgreSQL.

PostgreSQL comes from `support.pg` (the one schema-per-test fixture; it says when the
postgres cases skip and when they fail).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pg

from scheduler.store.db import Database, open_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shoal.db'}"
    else:
        with pg.schema_url() as url:
            yield url


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = open_database(database_url)
    yield db
    db.close()
