"""The fixture the CR reconcile tests share: a fresh SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.store.db import Database, open_database


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    yield db
    db.close()
