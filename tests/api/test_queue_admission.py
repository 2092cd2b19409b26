"""Queues that contradict themselves or their parent are refused (422 naming the field,
nothing stored); guarantees the cluster cannot keep today are admitted with a warning.
The inventory is 2 x 8 H100-80GB + 1 x 4 A100-40GB (20 GPUs)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN
from fastapi.testclient import TestClient

Q = "/api/v1/queues"


@pytest.fixture
def dept(client: TestClient) -> TestClient:
    r = client.post(Q, json={"name": "dept", "guaranteed": 4, "limit": 6}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return client


BAD: list[Any] = [
    pytest.param(
        {"name": "kid", "parent": "dept", "limit": 10},
        ["body", "limit", "total"],
        "above parent 'dept'",
        id="child-limit-above-parent",
    ),
    pytest.param(
        {"name": "kid", "parent": "dept", "guaranteed": 8},
        ["body", "guaranteed", "total"],
        "above parent 'dept'",
        id="child-guarantee-above-parent-limit",
    ),
    pytest.param(
        {"name": "tpu", "guaranteed": {"total": 2, "TPU-v5": 2}},
        ["body", "guaranteed", "TPU-v5"],
        "no node has GPU model",
        id="guarantee-for-unknown-model",
    ),
    pytest.param(
        {"name": "tpu", "limit": {"TPU-v5": 2}},
        ["body", "limit", "TPU-v5"],
        "no node has GPU model",
        id="limit-for-unknown-model",
    ),
    pytest.param(
        {"name": "odd", "guaranteed": {"total": 2, "H100-80GB": 4}},
        ["body", "guaranteed", "H100-80GB"],
        "exceed the queue's whole guarantee",
        id="model-guarantee-above-total",
    ),
]


@pytest.mark.parametrize(("body", "loc", "word"), BAD)
def test_contradictory_queue_is_422_naming_the_field(
    dept: TestClient, body: dict[str, Any], loc: list[Any], word: str
) -> None:
    before = dept.get(Q, headers=ADMIN).json()["count"]
    r = dept.post(Q, json=body, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert any(d["loc"] == loc and word in d["msg"] for d in r.json()["detail"]), r.json()
    assert dept.get(Q, headers=ADMIN).json()["count"] == before


def test_a_parent_limit_cannot_drop_below_a_childs(dept: TestClient) -> None:
    kid = {"name": "kid", "parent": "dept", "guaranteed": 2, "limit": 5}
    assert dept.post(Q, json=kid, headers=ADMIN).status_code == 201
    r = dept.patch(f"{Q}/dept", json={"limit": 3}, headers=ADMIN)
    assert r.status_code == 422
    assert any("child 'kid'" in d["msg"] for d in r.json()["detail"])
    assert dept.get(f"{Q}/dept", headers=ADMIN).json()["limit"]["total"] == 6


def test_over_committed_guarantees_are_admitted_with_a_warning(client: TestClient) -> None:
    # vision (8) and nlp (4) exist: 12 of 20 GPUs are guaranteed.
    ok = client.post(Q, json={"name": "fits", "guaranteed": 8}, headers=ADMIN).json()
    assert ok["warnings"] == []
    huge = client.post(Q, json={"name": "huge", "guaranteed": 1000}, headers=ADMIN)
    assert huge.status_code == 201
    assert any("cluster has 20" in w for w in huge.json()["warnings"])
    more = client.post(Q, json={"name": "more", "guaranteed": 1}, headers=ADMIN).json()
    assert any("over-committed" in w for w in more["warnings"])


def test_memory_sized_workers_count_as_the_core_counts_them(client: TestClient) -> None:
    """Issue 26's second bug: 4 workers of 40 GiB on 80 GiB GPUs are 4 x 0.5 = 2 GPUs, as
    the core places them, not 4 whole GPUs, against a queue limited to 3."""
    r = client.post(Q, json={"name": "small", "limit": 3}, headers=ADMIN)
    assert r.status_code == 201, r.text
    body = {"name": "mem", "queue": "small", "image": "x", "workers": 4, "gpuMemory": "40Gi"}
    body["gpuType"] = ["H100-80GB"]
    assert client.post("/api/v1/jobs", json=body, headers=ADMIN).status_code == 201
    big = {**body, "name": "mem8", "workers": 8}  # 4 GPUs: over the limit for ever
    r = client.post("/api/v1/jobs", json=big, headers=ADMIN)
    assert r.status_code == 422 and "may hold at most 3" in r.text, r.text
