"""A cursor naming a sequence number no BIGINT column can hold is a 4xx, on both databases."""

from __future__ import annotations

import base64

import pytest

from scheduler.store import errors
from scheduler.store.db import Database
from scheduler.store.jobs import list_jobs


def _cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


@pytest.mark.parametrize("seq", [2**63, 2**64 + 5, -1, 10**30])
def test_cursor_out_of_bigint_range_is_invalid_naming_the_cursor(
    database: Database, seq: int
) -> None:
    with database.session() as s, pytest.raises(errors.Invalid) as err:
        list_jobs(session=s, cursor=_cursor(seq))
    assert err.value.loc == ("query", "cursor")


def test_largest_bigint_cursor_is_an_empty_page(database: Database) -> None:
    with database.session() as s:
        page = list_jobs(session=s, cursor=_cursor(2**63 - 1))
    assert page.items == [] and page.next_cursor is None
