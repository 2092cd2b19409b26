"""Wakes through the database (`scheduler.store.wakeup`), on SQLite and PostgreSQL: a
`Notifier` on one connection pool (the API process) reaches a `Listener` on another (the
scheduler process); an ordinary write to the store (the loop's own) wakes nobody."""

from __future__ import annotations

import threading
import time

import pytest
from support.wait import eventually

from scheduler.store.db import Database, open_database
from scheduler.store.lease import acquire_lease
from scheduler.store.wakeup import POLL_S, Listener, Notifier

pytestmark = pytest.mark.integration  # listener and notifier threads


class Wakes:
    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


def test_a_notify_from_another_pool_wakes_the_listener(
    database: Database, database_url: str
) -> None:
    wakes = Wakes()
    listener = Listener(database, wakes)
    other = open_database(database_url)  # the API process's own engine
    notifier = Notifier(other)
    try:
        if database.engine.dialect.name == "postgresql":
            # It wakes once when it starts listening (wakes sent before were missed).
            eventually(lambda: wakes.count == 1, what="the first wake")
        wakes.event.clear()
        before = wakes.count
        notifier.notify()
        notifier.notify()  # calls while one is being sent are merged, never lost
        eventually(lambda: wakes.count > before, what="the listener to be woken")
    finally:
        notifier.close()
        listener.close()
        other.close()


def test_a_write_to_the_store_wakes_nobody(database: Database) -> None:
    wakes = Wakes()
    listener = Listener(database, wakes)
    try:
        if database.engine.dialect.name == "postgresql":
            eventually(lambda: wakes.count == 1, what="the first wake")
        before = wakes.count
        for _ in range(3):  # the loop renews its lease every cycle
            with database.session() as session:
                assert acquire_lease(session=session, holder="me", ttl_s=10)
        time.sleep(5 * POLL_S)  # several of the SQLite listener's looks
        assert wakes.count == before
    finally:
        listener.close()
