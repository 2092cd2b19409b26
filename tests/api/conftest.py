"""API fixtures: an app on a fresh SQLite file (or PostgreSQL via `pg_app`), three tokens
per role, two queues and a small inventory (2 nodes x 8 H100-80GB, 1 node x 4 A100-40GB).

What `shoal serve` wires in (logs, policy, loop health) is the `wiring` fixture's: none,
unless a test module overrides it or a test parametrizes it (`api.services.Wiring`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from support import pg
from typer.testing import CliRunner, Result

from api.app import create_app
from api.services import Wiring
from api.settings import Settings
from scheduler.cli import client as cli_client
from scheduler.cli.main import app as cli
from scheduler.model import Node
from scheduler.spec.queue import QueueSpec
from scheduler.store.cluster import save_inventory
from scheduler.store.db import open_database
from scheduler.store.queues import create_queue

TOKENS = """
admin-token: {user: root, role: admin}
vision-token: {user: alice, role: member, queues: [vision]}
nlp-token: {user: bob, role: member, queues: [nlp]}
viewer-token: {user: vera, role: viewer, queues: ["*"]}
"""
ADMIN = {"Authorization": "Bearer admin-token"}
VISION = {"Authorization": "Bearer vision-token"}
NLP = {"Authorization": "Bearer nlp-token"}
VIEWER = {"Authorization": "Bearer viewer-token"}
NODES = (
    Node("h1", 96_000, 1_000_000, 8, "H100-80GB", 81920),
    Node("h2", 96_000, 1_000_000, 8, "H100-80GB", 81920),
    Node("a1", 32_000, 256_000, 4, "A100-40GB", 40960),
)
MAX_BODY = 64 * 1024


def build_app(url: str, wiring: Wiring | None = None, **settings: Any) -> FastAPI:
    """`settings`: over the fixtures' (e.g. `worker_key`, `tokens_yaml`)."""
    base: dict[str, Any] = {"tokens_yaml": TOKENS, "max_body_bytes": MAX_BODY}
    app = create_app(Settings(database_url=url, **(base | settings)), wiring)
    with app.state.database.session() as s:
        create_queue(session=s, spec=QueueSpec(name="vision", guaranteed=8, limit=16))
        create_queue(session=s, spec=QueueSpec(name="nlp", guaranteed=4))
        save_inventory(session=s, nodes=NODES)
    return app


@pytest.fixture
def wiring() -> Wiring:
    return Wiring()


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file at the newest revision, made once: each test's app starts from a
    copy, on which the migrations find nothing to do (a fifth of an API test's time)."""
    path = tmp_path_factory.mktemp("migrated") / "api.db"
    open_database(f"sqlite:///{path}").close()
    return path


@pytest.fixture
def app(tmp_path: Path, wiring: Wiring, migrated: Path) -> Iterator[FastAPI]:
    shutil.copyfile(migrated, tmp_path / "api.db")
    app = build_app(f"sqlite:///{tmp_path / 'api.db'}", wiring)
    yield app
    app.state.database.close()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def pg_app() -> Iterator[FastAPI]:
    """The same app on PostgreSQL (a schema of its own); skips without SHOAL_TEST_PG_URL."""
    with pg.schema_url("api") as url:
        app = build_app(url)
        yield app
        app.state.database.close()


Shoal = Callable[..., Result]


def cli_on(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Shoal:
    """`shoal ARGS...` run in-process against `app` as the admin (the CLI's client is
    pointed at it for the rest of the test)."""
    real = cli_client.Api.__init__

    def via_testclient(
        self: cli_client.Api, url: str | None = None, token: str | None = None
    ) -> None:
        real(self, "http://testserver", "admin-token")
        self.http = TestClient(app, base_url="http://testserver", headers=ADMIN)

    monkeypatch.setattr(cli_client.Api, "__init__", via_testclient)
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args))

    return run


@pytest.fixture
def shoal(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Shoal:
    """`shoal ARGS...` run in-process against `app` as the admin."""
    return cli_on(app, monkeypatch)


def job_body(**kw: object) -> dict[str, object]:
    body: dict[str, object] = {"name": "train", "queue": "vision", "image": "img:1", "gpu": 1}
    body.update(kw)
    return body
