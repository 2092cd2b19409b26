"""A long fuzz of the REST API against a live `shoal serve`, per role (not a test):
schemathesis cases from the server's own OpenAPI document, seeded as tests/api/test_fuzz.py
is (bench/fuzz_seeding.py: bodies often name a queue that exists, path ids are often a
real job's or queue's; the seed jobs run, and write output, for the whole run, so events,
logs, cancel and progress reach a live job), sent over HTTP with an admin, a member (queue
vision), a viewer and a seed job's worker token (`--roles`).

    nice .venv/bin/python -m bench.api_fuzz [--requests 10000] [--databases sqlite,postgres]
        [--roles admin,member,viewer,worker]

Each database gets a fresh server (local backend, the scheduler loop running) in a fresh
state directory; PostgreSQL runs when SHOAL_TEST_PG_URL is set, in a schema of its own.
Reported per database and role: requests sent, how many were 2xx/4xx, any 500s (a bug:
the case is printed), 503s (shed or database busy; they carry Retry-After), and the
wall time (and the part of it spent waiting for answers; the rest is generating cases).
The three roles run side by side, each in a process of its own. Exit status 1 when any
request got a 500.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
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
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok

from bench import fuzz_seeding
from bench.fuzz_seeding import QUEUES
from bench.serving import ROOT, free_port, pg_schema, serving
from scheduler import workertoken

CHUNK = 100  # cases per hypothesis run: the time limit is checked between runs
TOKENS = {
    "admin": ("fuzz-admin", {"user": "root", "role": "admin"}),
    "member": ("fuzz-member", {"user": "alice", "role": "member", "queues": ["vision"]}),
    "viewer": ("fuzz-viewer", {"user": "vera", "role": "viewer", "queues": ["*"]}),
}


# A seed job's command: it prints a line a second until cancelled (at the end of the run),
# for an hour at most: workers outlive their server (a new one adopts them).
LIVE_S = 3600
LIVE_COMMAND = [
    "python3",
    "-c",
    f"import time\nfor i in range({LIVE_S}): print('step', i, flush=True); time.sleep(1)",
]
LIVE_PER_QUEUE = 3  # cancels by the fuzz stop some; the others stay live
WORKER_KEY = "fuzz-worker-key"


@contextmanager
def _serve(db_url: str | None) -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="shoal-fuzz-"))
    tokens = state / "tokens.yaml"
    tokens.write_text(json.dumps({tok: entry for tok, entry in TOKENS.values()}))
    port = free_port()
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port)]
    cmd += ["--state-dir", str(state)]
    env = {**os.environ, "SHOAL_API_TOKENS_FILE": str(tokens), "SHOAL_SHARED_USER_OK": "1"}
    if db_url:  # the environment, not --database-url: any local user reads arguments
        env["SHOAL_DATABASE_URL"] = db_url
    env["SHOAL_WORKER_KEY"] = WORKER_KEY  # the seed jobs' worker tokens
    with serving(cmd, env, state, port) as (url, _):
        yield url


def _seed(url: str) -> list[str]:
    """The two queues and `LIVE_PER_QUEUE` running jobs in each; returns the jobs' ids."""
    h = {"Authorization": f"Bearer {TOKENS['admin'][0]}"}
    ids = []
    for q, guaranteed in zip(QUEUES, (4, 2), strict=True):
        r = httpx.post(
            f"{url}/api/v1/queues", json={"name": q, "guaranteed": guaranteed}, headers=h
        )
        r.raise_for_status()
        for i in range(LIVE_PER_QUEUE):
            body = {"name": f"seed-{q}-{i}", "queue": q, "image": "x", "gpu": 0.1}
            r = httpx.post(f"{url}/api/v1/jobs", json={**body, "command": LIVE_COMMAND}, headers=h)
            r.raise_for_status()
            ids.append(r.json()["id"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until they run (their logs exist)
        phases = [httpx.get(f"{url}/api/v1/jobs/{j}", headers=h).json()["phase"] for j in ids]
        if all(p == "Running" for p in phases):
            break
        time.sleep(0.5)
    return ids


def _stop(url: str, ids: list[str]) -> None:
    """Cancel the seed jobs and wait (a minute at most) until their workers are gone."""
    h = {"Authorization": f"Bearer {TOKENS['admin'][0]}"}
    for j in ids:
        httpx.post(f"{url}/api/v1/jobs/{j}/cancel", headers=h)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [httpx.get(f"{url}/api/v1/jobs/{j}", headers=h).json() for j in ids]
        # A job the fuzz deleted (404, no phase) is gone too.
        if all(j.get("phase", "Cancelled") in ("Cancelled", "Succeeded", "Failed") for j in found):
            return
        time.sleep(0.5)


def _memoize_fixed_dictionaries() -> None:
    """Profiled, generation was 60% of the driver's time and most of it was hypothesis
    validating a fresh `fixed_dictionaries` strategy that schemathesis builds on every
    draw of an object (the same keys and value strategies each time). Strategies are
    immutable, so one per (key, strategy) set is the same strategy, validated once."""
    original = st.fixed_dictionaries
    cache: dict[tuple[Any, ...], st.SearchStrategy[Any]] = {}

    def fixed_dictionaries(mapping: Any, *, optional: Any = None) -> st.SearchStrategy[Any]:
        if optional is not None or not isinstance(mapping, dict):
            return original(mapping, optional=optional)
        # The strategies themselves are in the key: alive, so their ids stay theirs.
        key = tuple((k, id(v), v) for k, v in mapping.items())
        found = cache.get(key)
        if found is None:
            found = cache[key] = original(mapping)
        return found

    st.fixed_dictionaries = fixed_dictionaries


class _Tally:
    """The answers one role's run got: status counts (in all, per operation), the first
    server errors, and the seconds spent waiting for answers."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.statuses: Counter[int] = Counter()
        self.by_op: dict[str, Counter[int]] = {}
        self.errors: list[str] = []
        self.http_s = 0.0
        # One connection pool for the whole run: without `session`, each call made its
        # own (a TCP connect per request).
        self.client = requests.Session()

    def total(self) -> int:
        return sum(self.statuses.values())

    def send(self, case: Any) -> None:
        t = time.monotonic()
        r = case.call(base_url=self.url, headers=self.headers, session=self.client)
        self.http_s += time.monotonic() - t
        self.statuses[r.status_code] += 1
        self.by_op.setdefault(f"{case.method} {case.path}", Counter())[r.status_code] += 1
        if r.status_code >= 500 and r.status_code != 503 and len(self.errors) < 20:
            self.errors.append(
                f"{r.status_code} {case.method} {case.formatted_path}: {r.text[:300]}"
            )


def _fuzz(
    url: str, role: str, target: int, seed_jobs: list[str], max_seconds: float = math.inf
) -> dict[str, Any]:
    """`target` requests with this role's token, or fewer if `max_seconds` runs out first
    (checked between runs of at most `CHUNK` cases)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")

    # A worker token is good for its own job (the first seed) only: aim there.
    fuzz_seeding.install(schema, seed_jobs[:1] if role == "worker" else seed_jobs)

    ops = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    token = os.environ["SHOAL_FUZZ_WORKER_TOKEN"] if role == "worker" else TOKENS[role][0]
    tally = _Tally(url, {"Authorization": f"Bearer {token}"})
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    _run_rounds(schema, ops, tally, target, deadline)
    total, statuses = tally.total(), tally.statuses
    return {
        "role": role,
        "requests": total,
        "2xx": sum(n for s, n in statuses.items() if 200 <= s < 300),
        "4xx": sum(n for s, n in statuses.items() if 400 <= s < 500),
        "500": sum(n for s, n in statuses.items() if s >= 500 and s != 503),
        "503": statuses.get(503, 0),
        "stopped_by_max_seconds": total < target and time.monotonic() > deadline,
        "seconds": round(time.monotonic() - t0, 1),
        "http_seconds": round(tally.http_s, 1),  # waiting for answers; the rest is generation
        "errors": tally.errors,
        "statuses": dict(sorted(statuses.items())),
        "by_operation": {k: dict(sorted(v.items())) for k, v in sorted(tally.by_op.items())},
    }


def _run_rounds(schema: Any, ops: list[Any], tally: _Tally, target: int, deadline: float) -> None:
    """Operations with few distinct inputs (no parameters) run out early; their shortfall
    goes to the operations after them, and passes repeat until the role has had `target`
    requests in all."""

    def send(case: Any) -> None:  # a plain function, as Hypothesis's `given` expects
        tally.send(case)

    for round_ in range(5):
        for i, op in enumerate(ops):
            before = tally.total()
            per_op = math.ceil((target - before) / (len(ops) - i))
            # Hypothesis stops early on an operation whose inputs are few; repeat with fresh
            # seeds until it has had its share of the requests.
            for attempt in range(60):
                left = per_op - (tally.total() - before)
                if left <= 0 or time.monotonic() > deadline:
                    break
                run = settings(
                    max_examples=min(left, CHUNK),
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )(given(case=op.as_strategy(hooks=schema.hooks))(send))
                hypothesis.seed(round_ * 60 + attempt)(run)()
        if tally.total() >= target or time.monotonic() > deadline:
            break


def _role_in_child(
    url: str, role: str, target: int, seed_jobs: list[str], max_seconds: float, worker: str
) -> subprocess.Popen[str]:
    """One role's fuzz in a process of its own: generation is CPU-bound Python, so the
    roles run side by side instead of one after another."""
    cmd = [sys.executable, "-m", "bench.api_fuzz", "role", url, role, str(target), str(max_seconds)]
    env = {**os.environ, "SHOAL_FUZZ_WORKER_TOKEN": worker}
    return subprocess.Popen(
        [*cmd, ",".join(seed_jobs)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "role":
        url, role, target, max_seconds, seeds = sys.argv[2:7]
        _memoize_fixed_dictionaries()
        print(json.dumps(_fuzz(url, role, int(target), seeds.split(","), float(max_seconds))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000, help="per role and database")
    ap.add_argument("--databases", default="sqlite,postgres")
    ap.add_argument("--roles", default="admin,member,viewer,worker")
    ap.add_argument(
        "--max-seconds", type=float, default=math.inf, help="per database: stop sending after"
    )
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
            worker = workertoken.mint(WORKER_KEY, seed_jobs[0])
            t0 = time.monotonic()
            children = [
                _role_in_child(url, role, args.requests, seed_jobs, args.max_seconds, worker)
                for role in args.roles.split(",")
            ]
            for child in children:
                out, _ = child.communicate()
                if child.returncode != 0:
                    raise SystemExit(f"a fuzz process failed (exit {child.returncode})")
                r = json.loads(out)
                bad += r["500"]
                print(json.dumps({"database": db, **r}), flush=True)
            wall = time.monotonic() - t0
            _stop(url, seed_jobs)
            print(json.dumps({"database": db, "roles_side_by_side_seconds": round(wall, 1)}))
    return 1 if bad else 0


@contextmanager
def _nullcontext() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
