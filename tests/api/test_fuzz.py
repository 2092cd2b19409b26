"""Schemathesis over the whole OpenAPI document, once per role (admin, member, viewer):
no 5xx, every response matches the schema (status codes, content types, bodies).

Seeded so that requests reach past the lookups: a generated `queue` is often one that
exists (so a member does create jobs in its own queue), and path ids are often a real
job's (the member's own, another team's) or a real queue's name. The role matrix itself
is tested in test_auth_matrix.py; the long per-role fuzz against a live server is
`bench/api_fuzz.py` (docs/benchmarks.md)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import ADMIN, VIEWER, VISION, build_app, job_body
from hypothesis import HealthCheck, settings
from schemathesis import checks

from scheduler import store
from scheduler.spec import JobSpec

# The seeding hooks live in bench/ (shared with bench/api_fuzz.py), as tests/placement do.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from bench import fuzz_seeding  # noqa: E402

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
        for q in fuzz_seeding.QUEUES
    ]


class NoLogs:
    """A log source with no files (as `shoal serve` gives the local backend's)."""

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return []


APP.state.log_source = NoLogs()  # without one, /logs is a documented 501
MEMBER = {"calls": 0, "created": 0}  # what the member's run reached
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


# The seeding hooks, shared with bench/api_fuzz.py.
fuzz_seeding.install(schema, SEED_JOBS)


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
