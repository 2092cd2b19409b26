"""Bad input: 422 (413 for size) naming the field and the reason; nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN, MAX_BODY, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.store.jobs import list_jobs

J = "/api/v1/jobs"

# (body overrides, expected loc, a word of the expected message)
BAD_JOBS: list[Any] = [
    pytest.param({"name": "Train_1"}, ["body", "name"], "DNS-1123", id="name-not-dns"),
    pytest.param(
        {"priorityClassName": "High_Prio"},
        ["body", "priorityClassName"],
        "DNS-1123 subdomain",
        id="priority-class-not-dns",
    ),
    pytest.param({"queue": "Vision"}, ["body", "queue"], "DNS-1123", id="queue-not-dns"),
    pytest.param({"gpu": -1}, ["body", "gpu"], "greater than or equal to 0.01", id="negative-gpu"),
    pytest.param({"gpu": 0}, ["body", "gpu"], "greater than or equal to 0.01", id="zero-gpu"),
    pytest.param({"gpu": 0.005}, ["body", "gpu"], "0.01", id="gpu-below-minimum"),
    pytest.param({"gpu": 1.5}, ["body", "gpu"], "whole number", id="fraction-above-one"),
    pytest.param({"gpuMemory": "20Gi"}, ["body"], "not both", id="gpu-and-gpu-memory"),
    pytest.param({"queue": "nope"}, ["body", "queue"], "does not exist", id="unknown-queue"),
    pytest.param({"framework": "jax"}, ["body", "framework"], "pytorch", id="unknown-framework"),
    pytest.param({"image": ""}, ["body", "image"], "at least 1", id="empty-image"),
    pytest.param({"image": "a b"}, ["body", "image"], "without spaces", id="image-with-space"),
    pytest.param(
        {"command": "python train.py"}, ["body", "command"], "shell string", id="shell-command"
    ),
    pytest.param({"workers": 0}, ["body", "workers"], "greater than or equal", id="zero-workers"),
    pytest.param(
        {"workers": {"min": 4, "max": 2}},
        ["body", "workers"],
        "max (2) must be at least min (4)",
        id="elastic-max-below-min",
    ),
    pytest.param(
        {"workers": {"min": 2}}, ["body", "workers"], "max: Field required", id="elastic-no-max"
    ),
    pytest.param(
        {"workers": {"min": 0, "max": 2}},
        ["body", "workers"],
        "min: Input should be greater than or equal to 1",
        id="elastic-zero-min",
    ),
    pytest.param(
        {"workers": {"min": 1, "max": 2}, "framework": "mpi"},
        ["body"],
        "range is for pytorch jobs",
        id="elastic-not-pytorch",
    ),
    pytest.param(
        {"workers": {"min": 40, "max": 80}, "gpu": 1, "queue": "nlp"},
        ["body", "workers"],
        "40 workers can never run at once",
        id="elastic-min-beyond-cluster",
    ),
    pytest.param({"gpu": 16}, ["body", "gpu"], "largest node has 8", id="gpu-per-worker-too-big"),
    pytest.param(
        {"workers": 80, "gpu": 1, "queue": "nlp"},
        ["body", "workers"],
        "holds at most 20",
        id="workers-beyond-cluster",
    ),
    pytest.param({"workers": 20, "gpu": 1}, ["body", "workers"], "limit", id="beyond-queue-limit"),
    pytest.param(
        {"gpu": None, "gpuMemory": "100Gi"},
        ["body", "gpuMemory"],
        "largest GPU has 81920",
        id="gpu-memory-too-big",
    ),
    pytest.param(
        {"gpuType": ["TPU"]}, ["body", "gpuType", 0], "no node has GPU type", id="unknown-gpu-type"
    ),
    pytest.param(
        {"gpuType": ["A100-40GB"], "gpu": 8},
        ["body", "gpu"],
        "largest node has 4",
        id="too-big-for-allowed-type",
    ),
    pytest.param({"cpu": "-1"}, ["body", "cpu"], "positive", id="negative-cpu"),
    pytest.param({"memory": "lots"}, ["body", "memory"], "memory quantity", id="bad-memory"),
    pytest.param({"extra": 1}, ["body", "extra"], "not permitted", id="unknown-field"),
    pytest.param({"priority": 2**40}, ["body", "priority"], "less than", id="priority-overflow"),
    pytest.param(
        {"maxRuntime": 10**400}, ["body", "maxRuntime"], "less than", id="max-runtime-huge"
    ),
    pytest.param({"memory": "9" * 400}, ["body", "memory"], "at most 1Pi", id="memory-400-digits"),
    pytest.param(
        {"gpu": None, "gpuMemory": "9" * 400 + "Mi"},
        ["body", "gpuMemory"],
        "at most 1Pi",
        id="gpu-memory-400-digits",
    ),
]


def _count(app: FastAPI) -> int:
    with app.state.database.session() as s:
        return len(list_jobs(session=s).items)


@pytest.mark.parametrize(("overrides", "loc", "word"), BAD_JOBS)
def test_bad_job_is_422_naming_the_field_and_stores_nothing(
    app: FastAPI, client: TestClient, overrides: dict[str, Any], loc: list[Any], word: str
) -> None:
    r = client.post(J, json=job_body(**overrides), headers=VISION)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"] == loc and word in d["msg"] for d in detail), detail
    assert _count(app) == 0


def test_a_fitting_job_is_accepted(client: TestClient) -> None:
    # 40 half-GPU workers: more than one node, fewer than the cluster (20 GPUs -> 40 halves)
    r = client.post(J, json=job_body(workers=16, gpu=0.5), headers=VISION)
    assert r.status_code == 201, r.text


def test_an_elastic_job_is_accepted_and_shows_its_range(client: TestClient) -> None:
    r = client.post(J, json=job_body(workers={"min": 2, "max": 8}, gpu=1), headers=VISION)
    assert r.status_code == 201, r.text
    got = client.get(f"{J}/{r.json()['id']}", headers=VISION).json()
    assert got["spec"]["workers"] == {"min": 2, "max": 8}
    assert (got["workers"], got["resizes"]) == (2, [])  # pending: it starts at least at min


def test_oversized_body_is_413_and_stores_nothing(app: FastAPI, client: TestClient) -> None:
    body = job_body(env={"BIG": "x" * MAX_BODY})
    r = client.post(J, json=body, headers=VISION)
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body"]
    chunks = (b"x" * 4096 for _ in range(MAX_BODY // 4096 + 2))  # no Content-Length
    r = client.post(J, content=chunks, headers={**VISION, "Content-Type": "application/json"})
    assert r.status_code == 413
    assert _count(app) == 0


def test_malformed_json_names_the_body(client: TestClient) -> None:
    r = client.post(J, content=b"{nope", headers={**VISION, "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] == "body"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        pytest.param({"name": "Bad Name"}, ["body", "name"], id="queue-name"),
        pytest.param({"name": "q", "weight": 0}, ["body", "weight"], id="zero-weight"),
        pytest.param(
            {"name": "q", "guaranteed": -1}, ["body", "guaranteed", "total"], id="neg-guarantee"
        ),
        pytest.param({"name": "q", "parent": "nope"}, ["body", "parent"], id="unknown-parent"),
        pytest.param(
            {"name": "q", "guaranteed": {"total": False}},
            ["body", "guaranteed", "total"],
            id="bool-total",
        ),
        pytest.param(
            {"name": "q", "limit": {"total": True}}, ["body", "limit", "total"], id="bool-limit"
        ),
        pytest.param(
            {"name": "q", "guaranteed": 4, "limit": 2},
            ["body", "limit", "total"],
            id="limit-below-guarantee",
        ),
    ],
)
def test_bad_queue_is_422(client: TestClient, body: dict[str, Any], loc: list[Any]) -> None:
    r = client.post("/api/v1/queues", json=body, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert any(d["loc"] == loc for d in r.json()["detail"]), r.json()
    names = [q["name"] for q in client.get("/api/v1/queues", headers=ADMIN).json()["data"]]
    assert names == ["nlp", "vision"]


def test_unknown_job_and_route_use_the_error_shape(client: TestClient) -> None:
    r = client.get(f"{J}/nope", headers=VISION)
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["path", "job_id"]
    r = client.get("/api/v1/nothing", headers=VISION)
    assert r.status_code == 404 and r.json()["detail"][0]["msg"] == "Not Found"


def test_the_schema_states_the_gpu_minimum_and_strict_totals(client: TestClient) -> None:
    """What the API refuses, the OpenAPI document says (issue 15, fault 9)."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    gpu = next(o for o in schemas["JobSpec"]["properties"]["gpu"]["anyOf"] if "type" in o)
    assert gpu.get("minimum") == 0.01, gpu
    total = schemas["QuotaSpec"]["properties"]["total"]["anyOf"]
    assert {"type": "number", "minimum": 0, "maximum": 1_000_000} in total, total  # MAX_QUOTA_GPUS


def test_patch_with_every_nullable_field_null_is_accepted(client: TestClient) -> None:
    """The OpenAPI document marks QueueUpdate's fields nullable, so null must be accepted:
    none for parent/limit, the default for the rest (issue 15, fault 9)."""
    q = "/api/v1/queues/vision"
    r = client.patch(q, json={"weight": 3, "priority": 5}, headers=ADMIN)
    assert r.status_code == 200, r.text
    body = dict.fromkeys(["parent", "guaranteed", "limit", "weight", "priority", "version"])
    r = client.patch(q, json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["parent"] is None and out["limit"] is None
    assert (out["weight"], out["priority"]) == (1.0, 0)
    assert out["guaranteed"].get("total") is None
