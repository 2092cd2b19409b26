"""Schemathesis over the whole OpenAPI document, once per role (admin, member, viewer):
no 5xx, every response matches the schema (status codes, content types, bodies).

Seeded so that requests reach past the lookups: a generated `queue` is often one that
exists (so a member does create jobs in its own queue), and path ids are often a real
job's (the member's own, another team's) or a real queue's name. The role matrix itself
is tested in test_auth_matrix.py; the long per-role fuzz against a live server is
`bench/api_fuzz.py` (docs/benchmarks.md)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import ADMIN, VIEWER, VISION, build_app, job_body
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import checks

from scheduler import store
from scheduler.spec import JobSpec

# Per operation (x 18 operations): a few thousand calls in all, in a few minutes.
EXAMPLES = {"admin": 60, "member": 60, "viewer": 20}

# Built at collection time (parametrize needs the schema then); a throw-away SQLite file.
_DIR = tempfile.mkdtemp(prefix="shoal-fuzz-")
APP = build_app(f"sqlite:///{Path(_DIR) / 'fuzz.db'}")
with APP.state.database.session() as _s:
    SEED_JOBS = [
        store.submit_job(
            session=_s,
            spec=JobSpec.model_validate(job_body(name=f"seed-{q}", queue=q)),
            submitter="seed",
        )[0].id
        for q in ("vision", "nlp")
    ]
QUEUES = ["vision", "nlp"]


class NoLogs:
    """A log source with no files (as `shoal serve` gives the local backend's)."""

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return []


APP.state.log_source = NoLogs()  # without one, /logs is a documented 501
MEMBER = {"calls": 0, "created": 0}  # what the member's run reached
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.hook
def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
    """Bodies that name a queue often name one that exists, with a valid name, or are a
    plain valid job of that queue (the generated ones seldom pass every field's rules)."""
    if isinstance(body, dict) and isinstance(body.get("queue"), str):
        return st.tuples(
            st.sampled_from(range(4)), st.sampled_from(QUEUES), st.integers(0, 10**6)
        ).map(lambda t: _seeded(body, *t))
    return st.just(body)


def _seeded(body: dict[str, Any], how: int, queue: str, n: int) -> dict[str, Any]:
    if how == 0:
        return body
    if how == 1:
        return {**body, "queue": queue}
    if how == 2:
        return {**body, "queue": queue, "name": f"fuzz-{n}"}
    if "image" in body or "gpu" in body:  # a job: a valid one of that queue
        return {"name": f"fuzz-{n}", "queue": queue, "image": "img:1", "gpu": 1}
    return {**body, "queue": queue}


@schema.hook
def flatmap_path_parameters(context: Any, params: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    """Path ids that are often a real job's id or a real queue's name."""
    if not params:
        return st.just(params)
    out: dict[str, st.SearchStrategy[Any]] = {}
    for key, value in params.items():
        if key == "job_id":
            out[key] = st.sampled_from([value, *SEED_JOBS])
        elif key == "name":
            out[key] = st.sampled_from([value, *QUEUES])
        else:
            out[key] = st.just(value)
    return st.fixed_dictionaries(out)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    APP.state.database.close()
    shutil.rmtree(_DIR, ignore_errors=True)


CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


def _settings(role: str) -> Any:
    return settings(
        max_examples=EXAMPLES[role],
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )


@schema.parametrize()
@_settings("admin")
def test_api_conforms_to_its_schema_as_admin(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=ADMIN, checks=CHECKS)


@schema.parametrize()
@_settings("member")
def test_api_conforms_to_its_schema_as_member(case: schemathesis.Case) -> None:
    response = case.call_and_validate(headers=VISION, checks=CHECKS)
    MEMBER["calls"] += 1
    if case.method.upper() == "POST" and case.path == "/api/v1/jobs":
        MEMBER["created"] += response.status_code == 201


@schema.parametrize()
@_settings("viewer")
def test_api_conforms_to_its_schema_as_viewer(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=VIEWER, checks=CHECKS)


def test_the_seeding_lets_a_member_create_jobs() -> None:
    """The member's run above reached the handlers: it created jobs in its own queue."""
    if not MEMBER["calls"]:
        pytest.skip("the member's fuzz run was not selected")
    assert MEMBER["created"] > 0, MEMBER
