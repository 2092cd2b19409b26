"""A shed request (503 + Retry-After) does no database work: the load shedder is the
outermost middleware of the API (`--role api`'s app, with its wake through the
database), and authentication, the body, the route and the wake all sit inside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TOKENS, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event

from api.overload import LoadShedder
from api.services import services_of
from scheduler.cli import apirole
from scheduler.cli.wiring import WakeOnWrite
from scheduler.store import tokens as store_tokens
from scheduler.store.wakeup import wake_file


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    monkeypatch.setenv("SHOAL_DATABASE_URL", f"sqlite:///{tmp_path / 'shoal.db'}")
    monkeypatch.setenv("SHOAL_API_TOKENS", TOKENS)
    monkeypatch.delenv("SHOAL_API_TOKENS_FILE", raising=False)
    monkeypatch.delenv("SHOAL_POLICY_FILE", raising=False)
    monkeypatch.setenv("SHOAL_API_MAX_IN_FLIGHT", "1")
    monkeypatch.setenv("SHOAL_API_MAX_QUEUED", "0")
    monkeypatch.setenv("SHOAL_API_RETRY_AFTER", "3")
    app = apirole.app_from_env()
    yield app
    services_of(app).database.close()


def _layers(app: FastAPI) -> list[Any]:
    """The middleware from the outside in, down to the shedder."""
    layer: Any = app.middleware_stack
    out = []
    while not isinstance(layer, LoadShedder):
        out.append(layer)
        layer = layer.app
    return [*out, layer]


def test_a_shed_request_never_reaches_the_database(app: FastAPI) -> None:
    statements: list[str] = []
    engine = services_of(app).database.engine
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200  # builds the middleware stack
        *outside, shedder = _layers(app)
        # Outside the shedder, of Shoal's own middleware: only the wake, which acts on a
        # write that succeeded (the rest are the framework's error and limit layers).
        ours = [m for m in outside if type(m).__module__.split(".")[0] in ("api", "scheduler")]
        assert [type(m) for m in ours] == [WakeOnWrite]
        shedder.in_flight = shedder.max_in_flight  # the server is full
        statements.clear()
        # A stored token (the `shoal_` kind) is looked up in the database, were auth reached.
        stored = {"Authorization": f"Bearer {store_tokens.PREFIX}not-looked-up"}
        r = client.post("/api/v1/jobs", json=job_body(name="shed"), headers=stored)
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "3"
        assert statements == []
        assert not wake_file(services_of(app).database).exists()  # nor was a wake sent

        shedder.in_flight = 0  # room again: the same request reaches the store
        r = client.post("/api/v1/jobs", json=job_body(name="shed"), headers=stored)
        assert r.status_code == 401, r.text
        assert statements  # the token was looked up
