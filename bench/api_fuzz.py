"""A long fuzz of the REST API against a live `shoal serve`, per role (not a test):
schemathesis cases from the server's own OpenAPI document, seeded as tests/api/test_fuzz.py
is (bodies often name a queue that exists, path ids are often a real job's or queue's),
sent over HTTP with an admin, a member (queue vision) and a viewer token.

    nice .venv/bin/python -m bench.api_fuzz [--requests 10000] [--databases sqlite,postgres]

Each database gets a fresh server (local backend, the scheduler loop running) in a fresh
state directory; PostgreSQL runs when SHOAL_TEST_PG_URL is set, in a schema of its own.
Reported per database and role: requests sent, how many were 2xx/4xx, any 500s (a bug:
the case is printed), 503s (shed or database busy; they carry Retry-After), and the
wall time. Exit status 1 when any request got a 500.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok

from bench.serving import free_port, pg_schema, serving

TOKENS = {
    "admin": ("fuzz-admin", {"user": "root", "role": "admin"}),
    "member": ("fuzz-member", {"user": "alice", "role": "member", "queues": ["vision"]}),
    "viewer": ("fuzz-viewer", {"user": "vera", "role": "viewer", "queues": ["*"]}),
}
QUEUES = ["vision", "nlp"]


@contextmanager
def _serve(db_url: str | None) -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="shoal-fuzz-"))
    tokens = state / "tokens.yaml"
    tokens.write_text(json.dumps({tok: entry for tok, entry in TOKENS.values()}))
    port = free_port()
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port)]
    cmd += ["--state-dir", str(state)]
    if db_url:
        cmd += ["--database-url", db_url]
    env = {**os.environ, "SHOAL_API_TOKENS_FILE": str(tokens)}
    with serving(cmd, env, state, port) as (url, _):
        yield url


def _seed(url: str) -> list[str]:
    """The two queues and a job in each; returns the jobs' ids."""
    h = {"Authorization": f"Bearer {TOKENS['admin'][0]}"}
    ids = []
    for q, guaranteed in zip(QUEUES, (4, 2), strict=True):
        r = httpx.post(
            f"{url}/api/v1/queues", json={"name": q, "guaranteed": guaranteed}, headers=h
        )
        r.raise_for_status()
        body = {"name": f"seed-{q}", "queue": q, "image": "x", "gpu": 1, "command": ["true"]}
        r = httpx.post(f"{url}/api/v1/jobs", json=body, headers=h)
        r.raise_for_status()
        ids.append(r.json()["id"])
    return ids


def _seeded(body: dict[str, Any], how: int, queue: str, n: int) -> dict[str, Any]:
    """As tests/api/test_fuzz.py: the body, or with a queue that exists, and a valid name,
    or a plain valid job of that queue."""
    if how == 0:
        return body
    if how == 1:
        return {**body, "queue": queue}
    if how == 2:
        return {**body, "queue": queue, "name": f"fuzz-{n}"}
    if "image" in body or "gpu" in body:
        return {"name": f"fuzz-{n}", "queue": queue, "image": "x", "gpu": 1, "command": ["true"]}
    return {**body, "queue": queue}


def _fuzz(url: str, role: str, target: int, seed_jobs: list[str]) -> dict[str, Any]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")

    @schema.hook
    def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
        if isinstance(body, dict) and isinstance(body.get("queue"), str):
            how = st.tuples(
                st.sampled_from(range(4)), st.sampled_from(QUEUES), st.integers(0, 10**9)
            )
            return how.map(lambda t: _seeded(body, *t))
        return st.just(body)

    @schema.hook
    def flatmap_path_parameters(context: Any, params: Any) -> st.SearchStrategy[Any]:
        if not params:
            return st.just(params)
        out = {}
        for key, value in params.items():
            if key == "job_id":
                out[key] = st.sampled_from([value, *seed_jobs])
            elif key == "name":
                out[key] = st.sampled_from([value, *QUEUES])
            else:
                out[key] = st.just(value)
        return st.fixed_dictionaries(out)

    ops = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    per_op = math.ceil(target / len(ops))
    headers = {"Authorization": f"Bearer {TOKENS[role][0]}"}
    statuses: Counter[int] = Counter()
    by_op: dict[str, Counter[int]] = {}
    errors: list[str] = []
    t0 = time.monotonic()

    def send(case: Any) -> None:
        r = case.call(base_url=url, headers=headers)
        statuses[r.status_code] += 1
        by_op.setdefault(f"{case.method} {case.path}", Counter())[r.status_code] += 1
        if r.status_code >= 500 and r.status_code != 503 and len(errors) < 20:
            errors.append(f"{r.status_code} {case.method} {case.formatted_path}: {r.text[:300]}")

    for op in ops:
        before = sum(statuses.values())
        # Hypothesis stops early on an operation whose inputs are few; repeat with fresh
        # seeds until it has had its share of the requests.
        for attempt in range(50):
            left = per_op - (sum(statuses.values()) - before)
            if left <= 0:
                break
            run = settings(
                max_examples=left,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )(given(case=op.as_strategy(hooks=schema.hooks))(send))
            hypothesis.seed(attempt)(run)()
    total = sum(statuses.values())
    return {
        "role": role,
        "requests": total,
        "2xx": sum(n for s, n in statuses.items() if 200 <= s < 300),
        "4xx": sum(n for s, n in statuses.items() if 400 <= s < 500),
        "500": sum(n for s, n in statuses.items() if s >= 500 and s != 503),
        "503": statuses.get(503, 0),
        "seconds": round(time.monotonic() - t0, 1),
        "errors": errors,
        "statuses": dict(sorted(statuses.items())),
        "by_operation": {k: dict(sorted(v.items())) for k, v in sorted(by_op.items())},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000, help="per role and database")
    ap.add_argument("--databases", default="sqlite,postgres")
    ap.add_argument("--roles", default="admin,member,viewer")
    args = ap.parse_args()
    bad = 0
    for db in args.databases.split(","):
        pg = os.environ.get("SHOAL_TEST_PG_URL")
        if db == "postgres" and not pg:
            print("postgres: skipped (SHOAL_TEST_PG_URL is not set)")
            continue
        ctx = pg_schema(pg, "fuzz") if db == "postgres" and pg else _nullcontext()
        with ctx as db_url, _serve(db_url) as url:
            seed_jobs = _seed(url)
            for role in args.roles.split(","):
                r = _fuzz(url, role, args.requests, seed_jobs)
                bad += r["500"]
                print(json.dumps({"database": db, **r}), flush=True)
    return 1 if bad else 0


@contextmanager
def _nullcontext() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
