"""The fuzz's seeding, shared by `tests/api/test_fuzz.py` (in process) and `bench/api_fuzz.py`
(a live server): generated requests seldom get past the lookups (a queue that exists, a
real job id), so schemathesis hooks steer part of them there.

- a body that names a queue often names one that exists (`QUEUES`), and then often has a
  valid name too, or is replaced by a plain valid job of that queue (generated job bodies
  seldom pass every field's rules, so a member would otherwise never create a job);
- a path `job_id` is often a real job's id (`seed_jobs`: one per queue, so the member's
  own and another team's), a path `name` often a real queue's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

QUEUES = ("vision", "nlp")


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

    # Registered by function name: schemathesis reads the hook's kind from it.
    schema.hook(flatmap_body)
    schema.hook(flatmap_path_parameters)
