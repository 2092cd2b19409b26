"""Waking a scheduler in another process through the database (`shoal serve --role api`
beside `--role scheduler`): `Notifier` is the writer's side, `Listener` the scheduler's.

PostgreSQL: `NOTIFY shoal_wake` (delivered to every listening session once the
notifying transaction commits) and a listening connection of its own. SQLite: the
writer puts a new stamp in `<database>.wake` beside the database file and the listener
reads it every `POLL_S` (a stamp, not the file's time: two writes within one tick of the
kernel's coarse clock would leave the same time). Not `PRAGMA data_version`: it counts every other
connection's commit, the scheduler's own too (each cycle renews the lease), so the
loop would wake itself after every cycle. SQLite's processes share one host, so a file
beside the database reaches them all. A wake is a hint: a lost one costs at most the
loop's interval, so errors are logged and retried, never raised into a request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from scheduler.store.db import Database

log = logging.getLogger("shoal.wakeup")

CHANNEL = "shoal_wake"
POLL_S = 0.2  # SQLite: how often the listener looks at the wake file
RETRY_S = 2.0  # PostgreSQL: the wait before listening again after a lost connection


def wake_file(database: Database) -> Path | None:
    """The SQLite database's wake file; None for PostgreSQL or an in-memory database."""
    if database.engine.dialect.name != "sqlite":
        return None
    path = database.engine.url.database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(f"{path}.wake")


class Notifier:
    """`notify()` returns at once (it is called on the API's event loop); a thread of its
    own sends the wake, one for all the calls made while it was busy with the last."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._file = wake_file(database)
        self._sent = 0
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wake-notify", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        self._pending.set()

    def send(self) -> None:
        """One wake, now, on this thread."""
        if self._file is not None:
            self._sent += 1
            fd = os.open(self._file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, f"{os.getpid()} {self._sent} {time.time_ns()}\n".encode())
            finally:
                os.close(fd)
            return
        if self.database.engine.dialect.name != "postgresql":
            return  # an in-memory SQLite database: no other process shares it
        with self.database.engine.connect() as conn:
            conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
            conn.commit()

    def close(self) -> None:
        self._stop.set()
        self._pending.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            self._pending.wait()
            if self._stop.is_set():
                return
            self._pending.clear()
            try:
                self.send()
            except Exception as e:  # the database is away: the interval still schedules
                log.warning("could not wake the scheduler through the database: %s", e)


class Listener:
    """A thread that calls `on_wake` for each wake another process sends (and once after
    it listens again following a lost connection: wakes sent meanwhile were lost)."""

    def __init__(self, database: Database, on_wake: Callable[[], None]) -> None:
        self.database, self.on_wake = database, on_wake
        self._stop = threading.Event()
        self._file = wake_file(database)
        target = self._poll if self._file is not None else self._listen
        self._thread = threading.Thread(target=target, name="wake-listen", daemon=True)
        # PostgreSQL: LISTEN is issued before start() returns, so no wake sent after it is lost.
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(timeout=30)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _stamp(self) -> bytes | None:
        assert self._file is not None
        try:
            return self._file.read_bytes()
        except FileNotFoundError:
            return None

    def _poll(self) -> None:
        last = self._stamp()
        self._ready.set()
        while not self._stop.wait(POLL_S):
            now = self._stamp()
            if now != last:
                last = now
                self.on_wake()

    def _listen(self) -> None:
        if self.database.engine.dialect.name != "postgresql":
            self._ready.set()  # an in-memory SQLite database: no other process shares it
            return
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as e:
                self._ready.set()
                log.warning("cannot listen for wakes (%r); again in %gs", e, RETRY_S)
                self._stop.wait(RETRY_S)
                continue
            try:
                self._ready.set()
                self.on_wake()  # anything sent while not listening
                while not self._stop.is_set():
                    for _ in conn.notifies(timeout=1.0):
                        self.on_wake()
            except Exception as e:
                log.warning("lost the wake listener's connection (%r); again in %gs", e, RETRY_S)
                self._stop.wait(RETRY_S)
            finally:
                conn.close()

    def _connect(self) -> Any:
        """A psycopg connection of its own (out of the pool), in autocommit, listening."""
        raw = self.database.engine.raw_connection()
        conn = raw.driver_connection  # the psycopg connection (gone from `raw` once detached)
        raw.detach()  # kept for the thread's life; never handed back to the pool
        if conn is None:
            raise RuntimeError("the pool gave no driver connection")
        conn.autocommit = True
        conn.execute(f"LISTEN {CHANNEL}")
        return conn
