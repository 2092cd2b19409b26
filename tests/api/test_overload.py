"""Overload: past the in-flight and queue bounds a request gets 503 with Retry-After at
once, before anything of it is stored; probes still answer; a waiting request gets the
slot of the one before it. A real uvicorn server on loopback; a submission is held in
flight by an event (not by timing)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import ADMIN, NODES, TOKENS, VISION, job_body
from fastapi import FastAPI
from sqlalchemy.orm import Session

from api.app import create_app
from api.services import services_of
from api.settings import Settings
from scheduler.spec.queue import QueueSpec
from scheduler.store.cluster import save_inventory
from scheduler.store.queues import create_queue

pytestmark = pytest.mark.integration  # starts uvicorn on a thread

WAIT = 60.0  # generous: a busy machine must not fail these


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Held:
    """Holds the first request that opens a store session until `release` is set."""

    def __init__(self, app: FastAPI) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._taken = threading.Lock()
        self._first = True
        self._session: Callable[[], Any] = app.state.database.session

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._taken:
            hold, self._first = self._first, False
        if hold:
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the held request"
        with self._session() as s:
            yield s


@contextmanager
def serve(tmp_path: Path, **limits: Any) -> Iterator[tuple[str, FastAPI, Held]]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'overload.db'}", tokens_yaml=TOKENS, **limits
    )
    app = create_app(settings)
    with app.state.database.session() as s:
        create_queue(session=s, spec=QueueSpec(name="vision", guaranteed=8, limit=16))
        save_inventory(session=s, nodes=NODES)
    held = Held(app)
    app.state.database.session = held.session
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app, held
    finally:
        held.release.set()
        server.should_exit = True
        thread.join(WAIT)
        app.state.database.close()


def _submit_in_thread(url: str, name: str, out: dict[str, httpx.Response]) -> threading.Thread:
    def run() -> None:
        with httpx.Client(base_url=url, timeout=WAIT) as c:
            out[name] = c.post("/api/v1/jobs", json=job_body(name=name), headers=VISION)

    t = threading.Thread(target=run)
    t.start()
    return t


def _sample(app: FastAPI, name: str, labels: dict[str, str] | None = None) -> float:
    value = services_of(app).metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


def _idle(app: FastAPI) -> None:
    """Wait until no request is inside the app (the slot is freed just after the response
    is sent, so a client can be answered a moment before it)."""
    deadline = time.monotonic() + WAIT
    while _sample(app, "shoal_api_requests_in_flight") > 0:
        assert time.monotonic() < deadline, "a request never left the app"
        time.sleep(0.01)


def _names(c: httpx.Client) -> list[str]:
    r = c.get("/api/v1/jobs", params={"queue": "vision"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    jobs = r.json()["data"]
    return sorted(j["name"] for j in jobs)


def test_over_the_in_flight_bound_is_503_with_retry_after_and_nothing_stored(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, max_in_flight=1, max_queued=0, retry_after_s=7) as (url, app, held):
        out: dict[str, httpx.Response] = {}
        first = _submit_in_thread(url, "held", out)
        assert held.entered.wait(WAIT), "the first submission never reached the store"
        with httpx.Client(base_url=url, timeout=WAIT) as c:
            r = c.post("/api/v1/jobs", json=job_body(name="shed"), headers=VISION)
            assert r.status_code == 503, r.text
            assert r.headers["Retry-After"] == "7"
            assert r.json()["detail"][0]["type"] == "overloaded.queue_full"
            # Probes are never shed: an overloaded replica is busy, not dead.
            assert c.get("/healthz").status_code == 200
            assert c.get("/readyz").status_code == 200
            shed = {"why": "queue_full"}
            assert _sample(app, "shoal_api_shed_requests_total", shed) == 1
            assert _sample(app, "shoal_api_requests_in_flight") == 1
            held.release.set()
            first.join(WAIT)
            assert out["held"].status_code == 201, out["held"].text
            _idle(app)
            # The shed submission left nothing behind; its retry is an ordinary submission.
            assert _names(c) == ["held"]
            again = c.post("/api/v1/jobs", json=job_body(name="shed"), headers=VISION)
            assert again.status_code == 201, again.text
            assert _names(c) == ["held", "shed"]


def test_a_waiting_request_gets_the_slot_and_a_full_queue_sheds(tmp_path: Path) -> None:
    with serve(tmp_path, max_in_flight=1, max_queued=1, max_wait_s=WAIT) as (url, app, held):
        out: dict[str, httpx.Response] = {}
        first = _submit_in_thread(url, "first", out)
        assert held.entered.wait(WAIT)
        second = _submit_in_thread(url, "second", out)
        deadline = time.monotonic() + WAIT
        while _sample(app, "shoal_api_requests_waiting") < 1:
            assert time.monotonic() < deadline, "the second submission never queued"
            time.sleep(0.01)
        with httpx.Client(base_url=url, timeout=WAIT) as c:
            r = c.post("/api/v1/jobs", json=job_body(name="third"), headers=VISION)
            assert r.status_code == 503, r.text
            assert int(r.headers["Retry-After"]) > 0
            held.release.set()
            first.join(WAIT)
            second.join(WAIT)
            assert (out["first"].status_code, out["second"].status_code) == (201, 201)
            _idle(app)
            assert _names(c) == ["first", "second"]
            assert _sample(app, "shoal_api_requests_waiting") == 0


def test_a_request_waiting_past_max_wait_is_shed(tmp_path: Path) -> None:
    with serve(tmp_path, max_in_flight=1, max_queued=4, max_wait_s=0.0) as (url, app, held):
        out: dict[str, httpx.Response] = {}
        first = _submit_in_thread(url, "first", out)
        assert held.entered.wait(WAIT)
        with httpx.Client(base_url=url, timeout=WAIT) as c:
            r = c.post("/api/v1/jobs", json=job_body(name="late"), headers=VISION)
            assert r.status_code == 503, r.text
            assert r.json()["detail"][0]["type"] == "overloaded.waited_too_long"
            assert "Retry-After" in r.headers
            held.release.set()
            first.join(WAIT)
            _idle(app)
            assert _names(c) == ["first"]


def test_zero_turns_shedding_off(tmp_path: Path) -> None:
    with serve(tmp_path, max_in_flight=0, max_queued=0) as (url, app, held):
        held.release.set()
        with httpx.Client(base_url=url, timeout=WAIT) as c:
            for name in ("a", "b", "c"):
                r = c.post("/api/v1/jobs", json=job_body(name=name), headers=VISION)
                assert r.status_code == 201, r.text
        assert _sample(app, "shoal_api_shed_requests_total", {"why": "queue_full"}) == 0
