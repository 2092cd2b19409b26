"""Issue 25 items 0 and 4: strings no store or response can carry are refused at the front
door with a 422 naming the field, and nothing is stored: a lone surrogate (`"\\ud800"` in
JSON) or a NUL in any string of a job, queue, token or progress report, NaN in progress,
`gpu: true`. A job an older version stored with a lone surrogate breaks no listing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import ADMIN, NLP, VIEWER, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from scheduler.store import schema

J = "/api/v1/jobs"
JSON = {"Content-Type": "application/json"}


def _post(client: TestClient, url: str, body: Any, headers: dict[str, str]) -> Any:
    # json.dumps escapes the surrogate as `\ud800`, as a client's JSON would carry it.
    return client.post(url, content=json.dumps(body), headers={**headers, **JSON})


def _count(app: FastAPI, table: Any) -> int:
    with app.state.database.session() as s:
        return int(s.scalar(select(func.count()).select_from(table)) or 0)


JOBS: list[Any] = [
    pytest.param({"env": {"A": "x\ud800"}}, "env", "surrogate", id="env-value-surrogate"),
    pytest.param({"env": {"\udfffA": "1"}}, "env", "surrogate", id="env-name-surrogate"),
    pytest.param({"command": ["python", "\ud800"]}, "command", "surrogate", id="command"),
    pytest.param({"args": ["\udc80"]}, "args", "surrogate", id="args-surrogate"),
    pytest.param({"image": "img\u0000:1"}, "image", "NUL", id="image-nul"),
    pytest.param({"gpuType": ["H100\u0000"]}, "gpuType", "NUL", id="gpu-type-nul"),
    pytest.param({"nodeSelector": {"a": "\ud800"}}, "nodeSelector", "surrogate", id="selector"),
    pytest.param({"gpu": True}, "gpu", "number", id="gpu-true"),
    pytest.param({"workers": True}, "workers", "not true", id="workers-true"),
    pytest.param({"cpu": True}, "cpu", "not true", id="cpu-true"),
    pytest.param({"priority": False}, "priority", "not false", id="priority-false"),
]


@pytest.mark.parametrize(("overrides", "field", "word"), JOBS)
def test_a_job_with_an_unstorable_string_is_422_naming_the_field(
    app: FastAPI, client: TestClient, overrides: dict[str, Any], field: str, word: str
) -> None:
    r = _post(client, J, job_body(**overrides), VISION)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][:2] == ["body", field] and word in d["msg"] for d in detail), detail
    assert _count(app, schema.JobRow) == 0
    assert client.get(J, headers=ADMIN).status_code == 200


def test_a_queue_with_an_unstorable_string_is_422(app: FastAPI, client: TestClient) -> None:
    before = _count(app, schema.QueueRow)
    for body, field in (
        ({"name": "q1", "guaranteed": {"H100\ud800": 1}}, "guaranteed"),
        ({"name": "q1", "parent": "vi\u0000sion"}, "parent"),
    ):
        r = _post(client, "/api/v1/queues", body, ADMIN)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][:2] == ["body", field], r.text
    r = client.patch("/api/v1/queues/vision", content='{"parent": "\\ud800"}', headers=ADMIN)
    assert r.status_code == 422, r.text
    assert _count(app, schema.QueueRow) == before


def test_a_token_user_with_nul_or_surrogate_is_422(app: FastAPI, client: TestClient) -> None:
    for user in ("ali\u0000ce", "\ud800"):
        r = _post(client, "/api/v1/tokens", {"user": user, "role": "admin"}, ADMIN)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "user"], r.text
    r = _post(client, "/api/v1/tokens", {"user": "u", "queues": ["v\ud800"]}, ADMIN)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "queues"], r.text
    assert _count(app, schema.ApiTokenRow) == 0


PROGRESS: list[Any] = [
    pytest.param('{"loss": NaN}', "NaN", id="nan"),
    pytest.param('{"loss": Infinity}', "Infinity", id="infinity"),
    pytest.param('{"note": "a\\u0000b"}', "NUL", id="nul-value"),
    pytest.param('{"a\\u0000": 1}', "NUL", id="nul-key"),
    pytest.param('{"note": "\\ud800"}', "surrogate", id="surrogate"),
]


@pytest.mark.parametrize(("progress", "word"), PROGRESS)
def test_progress_with_nan_nul_or_surrogate_is_422(
    app: FastAPI, client: TestClient, progress: str, word: str
) -> None:
    job = client.post(J, json=job_body(), headers=VISION).json()["id"]
    before = _count(app, schema.JobEventRow)
    body = '{"attempt": 1, "worker": 0, "final": true, "progress": ' + progress + "}"
    r = client.post(f"{J}/{job}/progress", content=body, headers={**ADMIN, **JSON})
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"][:2] == ["body", "progress"] and word in d["msg"], d
    assert _count(app, schema.JobEventRow) == before


def test_a_stored_job_with_a_lone_surrogate_breaks_no_listing(
    app: FastAPI, client: TestClient
) -> None:
    """An older version stored one: the listings of its team, of admins and of all-queues
    viewers still answer, and the job shows it as U+FFFD."""
    ids = [client.post(J, json=job_body(name=n), headers=VISION).json()["id"] for n in "ab"]
    with app.state.database.session() as s:
        raw = dict(s.scalars(select(schema.JobRow.spec).where(schema.JobRow.id == ids[0])).one())
        raw["env"] = {"A": "x\ud800", "\udfffB": "1"}
        raw["command"] = ["echo", "\ud800"]
        s.execute(update(schema.JobRow).where(schema.JobRow.id == ids[0]).values(spec=raw))
        s.commit()
    for headers in (ADMIN, VIEWER, VISION):
        r = client.get(J, headers=headers)
        assert r.status_code == 200, r.text
        assert {j["id"] for j in r.json()["data"]} == set(ids)
    assert client.get(J, headers=NLP).json()["data"] == []
    r = client.get(f"{J}/{ids[0]}", headers=VISION)
    assert r.status_code == 200, r.text
    spec = r.json()["spec"]
    assert spec["env"] == {"A": "x\ufffd", "\ufffdB": "1"} and spec["command"][1] == "\ufffd"


def test_on_postgresql_nul_and_nan_are_422_not_500(pg_app: FastAPI) -> None:
    """PostgreSQL refuses NUL in text and JSON, and NaN in JSON: each was a 500 there."""
    with TestClient(pg_app) as client:
        job = client.post(J, json=job_body(), headers=VISION).json()["id"]
        for progress in ('{"loss": NaN}', '{"note": "a\\u0000b"}', '{"a\\u0000": 1}'):
            body = '{"attempt": 1, "worker": 0, "final": true, "progress": ' + progress + "}"
            r = client.post(f"{J}/{job}/progress", content=body, headers={**ADMIN, **JSON})
            assert r.status_code == 422, r.text
        r = _post(client, "/api/v1/tokens", {"user": "a\u0000", "role": "admin"}, ADMIN)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "user"]
        for overrides in ({"image": "i\u0000"}, {"env": {"A": "\ud800"}}):
            assert _post(client, J, job_body(name="x", **overrides), VISION).status_code == 422
        assert len(client.get(J, headers=ADMIN).json()["data"]) == 1
        assert _count(pg_app, schema.ApiTokenRow) == 0
