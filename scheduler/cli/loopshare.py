"""What the scheduler loop shares with an API in another process (plain `shoal serve`:
`scheduler.cli.apiproc`): its pulse, for the API's /healthz, and its per-cycle metric
families, for the API's /metrics.

The pulse is 16 bytes of memory both processes map (a memfd the API process inherits):
when the loop last began a cycle (CLOCK_MONOTONIC, one clock for the whole host) and
whether its thread is alive, copied there by a thread of the scheduler's every few
tenths of a second. /healthz reads it without asking the scheduler's process, whose GIL
the loop holds for long stretches (the reason the API left it). The metric families are
asked for at each scrape, over a socket pair the API process inherits: scrapes are rare,
and each family then exists once, in the loop's registry (`api.metrics.Metrics`).
"""

from __future__ import annotations

import logging
import mmap
import os
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from scheduler.cli.wiring import loop_problem
from scheduler.loop.service import Loop

log = logging.getLogger("shoal.serve")

LAYOUT = struct.Struct("dd")  # heartbeat (monotonic seconds), thread alive (1.0 or 0.0)
SCRAPE_TIMEOUT_S = 10.0  # a loop process that does not answer: the API's series alone


class Pulse:
    """The loop's heartbeat and liveness in shared memory (`fd`: inherited by the reader)."""

    def __init__(self, fd: int, *, writable: bool) -> None:
        self.fd = fd
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self._map = mmap.mmap(fd, LAYOUT.size, access=access)

    @classmethod
    def create(cls) -> Pulse:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("shoal-loop-pulse")
        else:  # not Linux: an unlinked temporary file serves the same
            fd, path = tempfile.mkstemp(prefix="shoal-loop-pulse-")
            os.unlink(path)
        os.ftruncate(fd, LAYOUT.size)
        return cls(fd, writable=True)

    def write(self, heartbeat: float, alive: bool) -> None:
        LAYOUT.pack_into(self._map, 0, heartbeat, 1.0 if alive else 0.0)

    def read(self) -> tuple[float, bool]:
        heartbeat, alive = LAYOUT.unpack_from(self._map, 0)
        return heartbeat, alive > 0.0

    def health(self, stall_s: float) -> Callable[[], str | None]:
        """/healthz's check of the loop, read from the pulse (`wiring.loop_problem`)."""

        def check() -> str | None:
            heartbeat, alive = self.read()
            return loop_problem(alive=alive, heartbeat=heartbeat, stall_s=stall_s)

        return check


def beat(
    pulse: Pulse, loop: Loop, thread: threading.Thread, stop: threading.Event, stall_s: float
) -> None:
    """Copy the loop's heartbeat into `pulse` now and, from a thread, until `stop`: often
    enough that the copy's lag is a small part of the stall limit."""
    every_s = min(1.0, stall_s / 20)

    def copy() -> None:
        pulse.write(loop.heartbeat, thread.is_alive())

    def run() -> None:
        while not stop.wait(every_s):
            copy()

    copy()
    threading.Thread(target=run, name="loop-pulse", daemon=True).start()


def serve_series(registry: CollectorRegistry) -> socket.socket:
    """Answer the other process's scrapes with `registry`'s families, from a thread, until
    it hangs up; returns the socket to hand it (`RemoteSeries` reads from it)."""
    mine, theirs = socket.socketpair()
    conn = Connection(mine.detach())

    def run() -> None:
        with conn:
            while True:
                try:
                    tag = conn.recv_bytes()
                    conn.send_bytes(tag + generate_latest(registry))
                except (EOFError, OSError):
                    return  # the API process is gone

    threading.Thread(target=run, name="loop-series", daemon=True).start()
    return theirs


class RemoteSeries(Collector):
    """The loop's families, asked of its process at each collection (`serve_series`).
    Each question carries a tag, so an answer that came after its scrape gave up is
    told from the next one's."""

    def __init__(self, fd: int) -> None:
        self._conn = Connection(fd)
        self._lock = threading.Lock()
        self._asked = 0

    def collect(self) -> Iterator[Metric]:
        text = self._ask()
        if text:
            yield from text_string_to_metric_families(text)

    def _ask(self) -> str | None:
        with self._lock:
            self._asked += 1
            tag = self._asked.to_bytes(8, "big")
            deadline = time.monotonic() + SCRAPE_TIMEOUT_S
            try:
                self._conn.send_bytes(tag)
                while self._conn.poll(max(0.0, deadline - time.monotonic())):
                    answer = self._conn.recv_bytes()
                    if answer[:8] == tag:
                        return answer[8:].decode()
            except (EOFError, OSError) as e:
                log.warning("the scheduler loop's metrics are unavailable: %s", e)
                return None
        log.warning("the scheduler loop's metrics: no answer in %gs", SCRAPE_TIMEOUT_S)
        return None
