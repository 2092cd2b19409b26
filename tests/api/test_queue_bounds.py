"""Issue 25 item 2: a guarantee or limit no cluster could hold (1e308, inf) is refused with
a 422 naming the field, on create and on update; the largest sane one is accepted."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN
from fastapi.testclient import TestClient

from scheduler.spec.queue import MAX_QUOTA_GPUS


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "huge", "guaranteed": 1e308}, "guaranteed"),
        ({"name": "huge", "guaranteed": {"total": 2e6}}, "guaranteed"),
        ({"name": "huge", "limit": 1e308}, "limit"),
        ({"name": "huge", "guaranteed": {"total": 1, "H100-80GB": 1e308}}, "guaranteed"),
        ({"name": "huge", "limit": {"H100-80GB": 1e7}}, "limit"),
    ],
)
def test_a_huge_quota_is_refused_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    r = client.post("/api/v1/queues", json=body, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert any(field in d["loc"] for d in r.json()["detail"]), r.json()
    assert client.get("/api/v1/queues/huge", headers=ADMIN).status_code == 404
    patch = {k: v for k, v in body.items() if k != "name"}
    r = client.patch("/api/v1/queues/vision", json=patch, headers=ADMIN)
    assert r.status_code == 422, r.text


def test_the_bound_itself_is_accepted(client: TestClient) -> None:
    r = client.post(
        "/api/v1/queues",
        json={"name": "big", "guaranteed": MAX_QUOTA_GPUS, "limit": MAX_QUOTA_GPUS},
        headers=ADMIN,
    )
    assert r.status_code == 201, r.text
