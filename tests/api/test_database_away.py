"""The database away is a 503 with Retry-After for reads and writes, not a 500."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc


def test_database_away_is_503_with_retry_after(
    app: FastAPI, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def away(*_: Any, **__: Any) -> Any:
        raise sa_exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))

    monkeypatch.setattr(app.state.database, "session", away)
    r = client.post("/api/v1/jobs", json=job_body(), headers=ADMIN)
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) > 0
    assert r.json()["detail"][0]["type"] == "unavailable"
