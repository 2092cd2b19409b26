"""Schemathesis over the whole OpenAPI document: no 5xx, every response matches the
schema (status codes, content types, bodies). Runs with an admin token so that requests
reach the handlers; the role matrix is tested in test_auth_matrix.py."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from conftest import ADMIN, build_app
from hypothesis import HealthCheck, settings
from schemathesis import checks

MAX_EXAMPLES = 150  # per operation (x 15 operations): a few thousand calls in under 3 min


# Built at collection time (parametrize needs the schema then); a throw-away SQLite file.
_DIR = tempfile.mkdtemp(prefix="shoal-fuzz-")
APP = build_app(f"sqlite:///{Path(_DIR) / 'fuzz.db'}")
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


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


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_schema(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=ADMIN, checks=CHECKS)
