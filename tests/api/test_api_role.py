"""`shoal serve --role api`'s app (`scheduler.cli.apirole.app_from_env`), in process: what
the API of one process took from the loop and the backend comes from the store here or
is absent, and the flags reach it through the environment (uvicorn's workers start it
from an import string)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN, TOKENS, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import services_of
from scheduler import model
from scheduler.cli import apirole
from scheduler.spec.queue import QueueSpec
from scheduler.store.cluster import save_inventory
from scheduler.store.queues import create_queue

NODES = (
    model.Node("a", 64000, 512000, 4, "A100", 81920),
    model.Node("b", 64000, 512000, 4, "A100", 81920, no_sharing="no GPU reached the reservation"),
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    env = apirole.role_environment(
        database_url=f"sqlite:///{tmp_path / 'shoal.db'}",
        tokens=tmp_path / "tokens.yaml",
        worker_key="k" * 32,
        policy="binpack",
        min_runtime_s=5,
        interval_s=2,
    )
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SHOAL_POLICY_FILE", raising=False)
    monkeypatch.delenv("SHOAL_API_TOKENS", raising=False)
    app = apirole.app_from_env()
    with services_of(app).database.session() as s:
        create_queue(session=s, spec=QueueSpec(name="vision", guaranteed=8))
        save_inventory(session=s, nodes=NODES)
    yield app
    services_of(app).database.close()


def test_the_flags_and_the_store_stand_in_for_the_loop(app: FastAPI) -> None:
    wiring = services_of(app).wiring
    assert wiring.core_config is not None
    assert (wiring.core_config.policy, wiring.core_config.min_runtime_s) == ("binpack", 5)
    assert wiring.excluded_nodes is not None
    assert wiring.excluded_nodes() == {"b": "no GPU reached the reservation"}
    assert wiring.loop_health is None and wiring.log_source is None
    assert services_of(app).worker_key == "k" * 32


def test_it_serves_without_a_loop(app: FastAPI) -> None:
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}  # no loop here to check
        assert client.get("/readyz").status_code == 200
        r = client.post("/api/v1/jobs", json=job_body(), headers=ADMIN)
        assert r.status_code == 201, r.text
        logs = client.get(f"/api/v1/jobs/{r.json()['id']}/logs", headers=ADMIN)
        assert logs.status_code == 501  # the workers are pods: `kubectl logs`
