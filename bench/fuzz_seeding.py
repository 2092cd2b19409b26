"""The fuzz's seeding, shared by `tests/api/test_fuzz.py` (in process) and `bench/api_fuzz.py`
(a live server): generated requests seldom get past the lookups (a queue that exists, a
real job id), so schemathesis hooks steer part of them there.

- a body that names a queue often names one that exists (`QUEUES`), and then often has a
  valid name too, or is replaced by a plain valid job of that queue (generated job bodies
  seldom pass every field's rules, so a member would otherwise never create a job);
- a path `job_id` is often a real job's id (`seed_jobs`: per queue, so the member's own
  and another team's), a path `name` often a real queue's;
- seed jobs are live (Running, with log files: `make_live`, `SeedLogs`), so events,
  logs, cancel (which only asks a running job to stop, so it stays live) and progress
  reach a live job's handlers; a progress body is often a valid report, and the logs
  query's `offsets` and `attempt` are often real ones or the edges (2^63-1, -1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from sqlalchemy.orm import Session

from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store.rows import get_job
from scheduler.store.transitions import record_placement, set_phase

QUEUES = ("vision", "nlp")
OFFSETS = ("0", "0,0", "3,1000000", str(2**63 - 1), "-1", "0,-5", "9" * 30, "1,,2")
ATTEMPTS = (0, 1, 2**31 - 1)


def make_live(session: Session, job_id: str, node: str, gpu: int) -> None:
    """Pending -> Scheduled -> Running on `gpu` of `node` (as the loop would record it)."""
    row = get_job(session=session, job_id=job_id)
    version = record_placement(
        session=session,
        job_id=job_id,
        expected_version=row.version,
        placements=[WorkerPlacement(0, node, (gpu,))],
        attempt=1,
    )
    set_phase(session=session, job_id=job_id, expected_version=version, phase=Phase.RUNNING)


class SeedLogs:
    """A log source (as `shoal serve` gives the local backend's) with two workers' output
    of attempt 1 for every job, in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        found = []
        for worker in range(2):
            path = self.root / f"{job_id[:32]}-{worker}.log"
            if not path.exists():
                path.write_bytes(b"step 1 loss 0.5\n" * (worker + 1) * 50)
            found.append((1, worker, path))
        return found


def progress_report(n: int) -> dict[str, Any]:
    return {"attempt": 1, "worker": n % 2, "progress": {"step": n, "loss": 0.5}, "final": False}


def seeded(body: dict[str, Any], how: int, queue: str, n: int) -> dict[str, Any]:
    """`how` 0: the body as generated; 1: with a queue that exists; 2: and a valid name;
    3: a job body becomes a plain valid job of that queue (other bodies as 1)."""
    if how == 0:
        return body
    if how == 1:
        return {**body, "queue": queue}
    if how == 2:
        return {**body, "queue": queue, "name": f"fuzz-{n}"}
    if "image" in body or "gpu" in body:  # a job: a valid one of that queue
        return {
            "name": f"fuzz-{n}",
            "queue": queue,
            "image": "img:1",
            "gpu": 1,
            "command": ["true"],
        }
    return {**body, "queue": queue}


def install(schema: Any, seed_jobs: Sequence[str]) -> None:
    """Register the two hooks on a schemathesis schema (`schema.hooks` must then be passed
    to `as_strategy` when cases are drawn by hand, as bench/api_fuzz.py does)."""

    def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
        if isinstance(body, dict) and {"attempt", "worker"} <= body.keys():  # progress
            report = st.integers(0, 10**6).map(progress_report)
            return st.one_of(st.just(body), report)
        if isinstance(body, dict) and isinstance(body.get("queue"), str):
            how = st.tuples(
                st.sampled_from(range(4)), st.sampled_from(QUEUES), st.integers(0, 10**9)
            )
            return how.map(lambda t: seeded(body, *t))
        return st.just(body)

    def flatmap_path_parameters(
        context: Any, params: dict[str, Any] | None
    ) -> st.SearchStrategy[Any]:
        if not params:
            return st.just(params)
        out: dict[str, st.SearchStrategy[Any]] = {}
        for key, value in params.items():
            if key == "job_id":
                out[key] = st.sampled_from([value, *seed_jobs])
            elif key == "name":
                out[key] = st.sampled_from([value, *QUEUES])
            else:
                out[key] = st.just(value)
        return st.fixed_dictionaries(out)

    def flatmap_query(context: Any, query: dict[str, Any] | None) -> st.SearchStrategy[Any]:
        path = str(getattr(getattr(context, "operation", None), "path", ""))
        if not path.endswith("/logs"):
            return st.just(query)
        given = dict(query or {})
        kept = {k: st.just(v) for k, v in given.items() if k not in ("offsets", "attempt")}
        mine = [given["offsets"]] if "offsets" in given else []
        tries = [given["attempt"]] if "attempt" in given else []
        return st.fixed_dictionaries(
            kept,
            optional={
                "offsets": st.sampled_from([*mine, *OFFSETS]),
                "attempt": st.sampled_from([*tries, *ATTEMPTS]),
            },
        )

    # Registered by function name: schemathesis reads the hook's kind from it.
    schema.hook(flatmap_body)
    schema.hook(flatmap_path_parameters)
    schema.hook(flatmap_query)
