"""Schemathesis over the whole OpenAPI document, once per role (admin, member, viewer, and
a job's worker token): no 5xx, every response matches the schema (status codes, content
types, bodies).

Seeded so that requests reach past the lookups: a generated `queue` is often one that
exists (so a member does create jobs in its own queue), and path ids are often a real
job's (the member's own, another team's) or a real queue's name. The seed jobs are live
(Running, with worker logs), so events, logs, cancel and progress reach a live job. The
role matrix itself is tested in test_auth_matrix.py; the long per-role fuzz against a
live server is `bench/api_fuzz.py` (docs/benchmarks.md)."""

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

from api.services import Wiring
from scheduler import workertoken
from scheduler.spec import JobSpec
from scheduler.store.submission import submit_job

# The seeding hooks live in bench/ (shared with bench/api_fuzz.py), as tests/placement do.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from bench import fuzz_seeding  # noqa: E402

# Per operation (x 18 operations): a few thousand calls in all, in a few minutes.
EXAMPLES = {"admin": 60, "member": 60, "viewer": 20, "worker": 10}
WORKER_KEY = "fuzz-worker-key"

# Built at collection time (parametrize needs the schema then); a throw-away SQLite file.
_DIR = tempfile.mkdtemp(prefix="shoal-fuzz-")
# It reads the seed jobs' logs from _DIR (without a log source, /logs is a 501).
_WIRING = Wiring(log_source=fuzz_seeding.SeedLogs(Path(_DIR)))
APP = build_app(f"sqlite:///{Path(_DIR) / 'fuzz.db'}", _WIRING, worker_key=WORKER_KEY)
# Live seed jobs (Running, with logs): LIVE_PER_QUEUE per queue, each on a GPU of its own.
LIVE_PER_QUEUE = 3
SEED_JOBS: list[str] = []
with APP.state.database.session() as _s:
    for _q, _node in zip(fuzz_seeding.QUEUES, ("h1", "h2"), strict=True):
        for _i in range(LIVE_PER_QUEUE):
            _spec = JobSpec.model_validate(job_body(name=f"seed-{_q}-{_i}", queue=_q))
            _id = submit_job(session=_s, spec=_spec, submitter="seed")[0].id
            fuzz_seeding.make_live(_s, _id, _node, _i)
            SEED_JOBS.append(_id)

WORKER = {"Authorization": f"Bearer {workertoken.mint(WORKER_KEY, SEED_JOBS[0])}"}
MEMBER = {"calls": 0, "created": 0}  # what the member's run reached
# What the admin's and the member's runs reached of a live job: operation -> calls.
pytestmark = pytest.mark.slow  # a fuzzer: hundreds of generated requests per role

LIVE_OPS = ("events", "logs", "cancel", "progress")
REACHED: dict[str, int] = dict.fromkeys(LIVE_OPS, 0)
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


def _reached(case: schemathesis.Case, response: Any) -> None:
    """Count a call that a live seed job's handler answered with success."""
    job = (case.path_parameters or {}).get("job_id")
    if job not in SEED_JOBS or not 200 <= response.status_code < 300:
        return
    op = case.path.rsplit("/", 1)[-1]
    if op == "logs" and not response.json()["chunks"]:
        return  # answered without reading any worker's output
    if op == "cancel" and response.json()["phase"] != "Running":
        return  # no longer live
    if op in REACHED:
        REACHED[op] += 1


@schema.parametrize()
@_settings("admin")
def test_api_conforms_to_its_schema_as_admin(case: schemathesis.Case) -> None:
    _reached(case, case.call_and_validate(headers=ADMIN, checks=CHECKS))


@schema.parametrize()
@_settings("member")
def test_api_conforms_to_its_schema_as_member(case: schemathesis.Case) -> None:
    response = case.call_and_validate(headers=VISION, checks=CHECKS)
    _reached(case, response)
    MEMBER["calls"] += 1
    if case.method.upper() == "POST" and case.path == "/api/v1/jobs":
        MEMBER["created"] += response.status_code == 201


@schema.parametrize()
@_settings("viewer")
def test_api_conforms_to_its_schema_as_viewer(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=VIEWER, checks=CHECKS)


@schema.parametrize()
@_settings("worker")
def test_api_conforms_to_its_schema_as_a_jobs_worker(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=WORKER, checks=CHECKS)


def test_the_fuzz_reached_a_live_jobs_events_logs_cancel_and_progress() -> None:
    """issue 25 item 0: the seeding makes requests reach a running job's handlers."""
    if not MEMBER["calls"]:
        pytest.skip("the member's fuzz run was not selected")
    assert all(REACHED[op] > 0 for op in LIVE_OPS), REACHED


def test_the_seeding_lets_a_member_create_jobs() -> None:
    """The member's run above reached the handlers: it created jobs in its own queue."""
    if not MEMBER["calls"]:
        pytest.skip("the member's fuzz run was not selected")
    assert MEMBER["created"] > 0, MEMBER
