"""Values no process can be given are refused at submission (422 naming the field, nothing
stored): an env name with `=` or that is empty, NUL bytes in env names, env values,
command or args."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.store.jobs import list_jobs

J = "/api/v1/jobs"

BAD: list[Any] = [
    pytest.param({"env": {"A=B": "1"}}, ["body", "env"], "A=B", id="env-name-with-equals"),
    pytest.param({"env": {"": "1"}}, ["body", "env"], "environment variable", id="empty-env-name"),
    pytest.param({"env": {"A\u0000B": "1"}}, ["body", "env"], "NUL", id="env-name-nul"),
    pytest.param({"env": {"1X": "1"}}, ["body", "env"], "digit", id="env-name-leading-digit"),
    pytest.param({"env": {"X": "a\u0000b"}}, ["body", "env"], "NUL", id="env-value-nul"),
    pytest.param(
        {"command": ["python", "-c\u0000x"]}, ["body", "command"], "NUL", id="command-nul"
    ),
    pytest.param({"args": ["ok", "b\u0000"]}, ["body", "args"], "args[1]", id="args-nul"),
]


def _count(app: FastAPI) -> int:
    with app.state.database.session() as s:
        return len(list_jobs(session=s).items)


@pytest.mark.parametrize(("overrides", "loc", "word"), BAD)
def test_unexecutable_values_are_422_and_store_nothing(
    app: FastAPI, client: TestClient, overrides: dict[str, Any], loc: list[Any], word: str
) -> None:
    r = client.post(J, json=job_body(**overrides), headers=VISION)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc and word in d["msg"] for d in detail), detail
    assert _count(app) == 0


def test_ordinary_env_names_are_accepted(client: TestClient) -> None:
    env = {"NCCL_DEBUG": "INFO", "my.var-1": "x=y", "_A": ""}
    r = client.post(J, json=job_body(env=env), headers=VISION)
    assert r.status_code == 201, r.text
