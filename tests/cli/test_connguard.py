"""Connections past SHOAL_API_MAX_CONNECTIONS get 503 with Retry-After from the HTTP
protocol, before the app runs; the connections already open are still served."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from support.wait import eventually

from scheduler.cli import connguard
from scheduler.cli.connguard import GuardedH11

CALLS: list[str] = []


def _hello(request: Request) -> PlainTextResponse:
    CALLS.append(request.method)
    return PlainTextResponse("hello")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("SHOAL_API_MAX_CONNECTIONS", "2")
    monkeypatch.setenv("SHOAL_API_RETRY_AFTER", "7")
    connguard._limits.cache_clear()
    app = Starlette(routes=[Route("/", _hello, methods=["GET", "POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    srv = uvicorn.Server(uvicorn.Config(app, http=GuardedH11, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: srv.started, what="uvicorn to start")
    try:
        yield int(sock.getsockname()[1])
    finally:
        srv.should_exit = True
        thread.join(30)
        connguard._limits.cache_clear()


def test_a_connection_past_the_bound_is_refused_before_the_app(server: int) -> None:
    url = f"http://127.0.0.1:{server}/"
    with httpx.Client() as first, httpx.Client() as second:
        assert first.get(url).text == "hello"
        assert second.get(url).text == "hello"  # two open (kept alive): the bound
        CALLS.clear()
        r = httpx.post(url, json={"name": "x" * 1000})  # a third connection
        assert r.status_code == 503
        assert r.headers["retry-after"] == "7" and r.headers["connection"] == "close"
        assert r.json()["detail"][0]["type"] == "overloaded.connections"
        assert CALLS == []  # the app never saw it
        assert first.post(url).text == "hello"  # the admitted ones are still served
    # Once they close, a new connection is admitted.
    eventually(lambda: httpx.get(url).text == "hello", what="a new connection to be served")
