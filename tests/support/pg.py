"""The one PostgreSQL fixture: a fresh schema on the test server per test.

PostgreSQL comes from SHOAL_TEST_PG_URL (scripts/postgres.sh starts one; scripts/test.sh
does that for CI). Without it the test skips, saying why, unless SHOAL_REQUIRE_PG is
set; with it, an unreachable server fails the test rather than skipping it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text


def url_or_skip() -> str:
    url = os.environ.get("SHOAL_TEST_PG_URL")
    if not url:
        if os.environ.get("SHOAL_REQUIRE_PG"):
            pytest.fail("SHOAL_REQUIRE_PG is set but SHOAL_TEST_PG_URL is not")
        pytest.skip('no PostgreSQL: set SHOAL_TEST_PG_URL (eval "$(scripts/postgres.sh start)")')
    return url


@contextmanager
def schema_url(prefix: str = "t") -> Iterator[str]:
    """A fresh schema, dropped afterwards; yields a URL whose search_path is it."""
    url = url_or_skip()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
    except Exception as exc:  # unreachable server: a failure, never a skip
        admin.dispose()
        pytest.fail(f"SHOAL_TEST_PG_URL={url} is set but unusable: {exc}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()
