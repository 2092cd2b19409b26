"""/healthz reports the scheduler loop's health (issue 10 conventions): 200 while it
cycles, 503 naming the stall while one cycle never ends, or when its thread is gone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import Wiring
from api.settings import Settings
from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.cli.wiring import loop_health
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.model import Node

pytestmark = pytest.mark.integration  # starts the loop on a thread


def eventually_true(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class WedgingBackend(SimBackend):
    """The sim backend, whose node listing hangs while `wedged` is set (an API server
    that accepts the connection and never answers)."""

    def __init__(self) -> None:
        super().__init__(cluster.load_nodes(), VirtualClock())
        self.wedged = threading.Event()
        self.released = threading.Event()

    def nodes(self) -> Sequence[Node]:
        if self.wedged.is_set():
            self.released.wait(120)
        return super().nodes()


def test_healthz_fails_while_the_loop_is_wedged_and_recovers(app: FastAPI) -> None:
    backend = WedgingBackend()
    loop = Loop(app.state.database, backend, config=LoopConfig(holder="h", interval_s=0.05))
    stop = threading.Event()
    thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
    # The app as `shoal serve` makes it: on the loop's store, wired to the loop's thread.
    wiring = Wiring(loop_health=loop_health(loop, thread, stall_s=1.0))
    served = create_app(Settings(database=app.state.database), wiring)
    thread.start()
    try:
        with TestClient(served) as c:
            assert eventually_true(lambda: c.get("/healthz").status_code == 200)
            backend.wedged.set()
            assert eventually_true(lambda: c.get("/healthz").status_code == 503)
            body = c.get("/healthz").json()
            assert body["status"].startswith("scheduler loop stalled"), body
            assert c.get("/readyz").status_code == 200  # the database is fine
            backend.wedged.clear()
            backend.released.set()
            assert eventually_true(lambda: c.get("/healthz").json() == {"status": "ok"})
            stop.set()
            loop.wake()
            thread.join(30)
            got = c.get("/healthz")
            assert got.status_code == 503 and "thread has exited" in got.json()["status"]
    finally:
        stop.set()
        backend.released.set()
        loop.wake()
        thread.join(30)
