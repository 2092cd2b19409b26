"""Issue 25 item 0: replicas migrating a fresh database at once all come up (one of two
crashed in 1 of 5 tries): migration holds a lock (PostgreSQL: an advisory lock; SQLite: a
file lock next to the database), so the second finds the schema made and does nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from support import pg

from scheduler.store import db as store_db
from scheduler.store import schema

pytestmark = pytest.mark.integration  # starts replicas as processes

REPLICAS = 2
TRIES = 5


REPLICA = """
import sys, time
from pathlib import Path
from scheduler.store import db
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
db.migrate(db.make_engine(sys.argv[1]))
"""


def _race(url: str, go: Path) -> list[str]:
    """REPLICAS processes migrate `url` at the same moment (each waits for `go`, once
    its imports are done); returns the errors of those that failed."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REPLICA, url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(REPLICAS)
    ]
    time.sleep(3)  # their imports
    go.touch()
    failures = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            failures.append(out[-2000:])
    return failures


def _matches_models(url: str) -> bool:
    database = store_db.open_database(url, run_migrations=False)
    try:
        with database.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": False})
            return compare_metadata(ctx, schema.Base.metadata) == []
    finally:
        database.close()


def test_replicas_migrating_a_fresh_sqlite_file_at_once(tmp_path: Path) -> None:
    for i in range(TRIES):
        url = f"sqlite:///{tmp_path / f'race{i}.db'}"
        assert _race(url, tmp_path / f"go{i}") == [], f"try {i}"
        assert _matches_models(url)


@pytest.mark.postgres
def test_replicas_migrating_a_fresh_postgresql_schema_at_once(tmp_path: Path) -> None:
    for i in range(TRIES):
        with pg.schema_url("race") as url:
            assert _race(url, tmp_path / f"go{i}") == [], f"try {i}"
            assert _matches_models(url)
