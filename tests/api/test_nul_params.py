"""NUL bytes in the path or the query are a 422 naming where, before any database sees them."""

from __future__ import annotations

from conftest import ADMIN
from fastapi.testclient import TestClient


def test_nul_in_path_is_422(client: TestClient) -> None:
    r = client.get("/api/v1/jobs/a%00b", headers=ADMIN)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path"]


def test_nul_in_query_is_422(client: TestClient) -> None:
    r = client.get("/api/v1/jobs?queue=a%00b", headers=ADMIN)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query"]
