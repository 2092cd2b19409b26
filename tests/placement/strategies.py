"""Hypothesis strategies for placement: clusters, jobs and task mixes, in one place."""

from __future__ import annotations

from hypothesis import strategies as st

from scheduler import model as m
from scheduler.placement import Demand

MODELS = ("T4", "A100")
GPUS = (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.75, 1.0, 2.0, 4.0, 8.0)


@st.composite
def nodes(draw: st.DrawFn) -> m.Node:
    k = draw(st.integers(0, 1000))
    return m.Node(
        f"n{k:04d}",
        draw(st.sampled_from([4000, 16_000, 64_000])),
        draw(st.sampled_from([8192, 65_536])),
        draw(st.sampled_from([0, 1, 2, 4, 8])),
        draw(st.sampled_from(MODELS)),
        draw(st.sampled_from([16_384, 40_960])),
    )


clusters = st.lists(nodes(), min_size=1, max_size=5, unique_by=lambda n: n.name)


@st.composite
def jobs(draw: st.DrawFn, k: int = 0) -> m.JobRequest:
    by_memory = draw(st.booleans()) and draw(st.booleans())
    return m.JobRequest(
        f"j{k}",
        "q",
        workers=draw(st.integers(1, 4)),
        gpu=0.0 if by_memory else draw(st.sampled_from(GPUS)),
        gpu_memory_mib=draw(st.sampled_from([4096, 10_000, 20_000])) if by_memory else None,
        cpu_milli=draw(st.sampled_from([0, 1000, 4000])),
        memory_mib=draw(st.sampled_from([0, 1024, 8192])),
        gpu_types=draw(st.sampled_from([(), ("T4",), ("A100",), ("H100",)])),
    )


job_lists = st.lists(st.integers(0, 10**6), min_size=1, max_size=12).flatmap(
    lambda ks: st.tuples(*[jobs(i) for i in range(len(ks))])
)

task_types = st.builds(
    Demand,
    cpu_milli=st.sampled_from([0, 1000, 4000, 16_000]),
    memory_mib=st.sampled_from([0, 1024, 65_536]),
    gpu=st.sampled_from(GPUS),
    gpu_types=st.sampled_from([(), ("T4",)]),
    gpu_memory_mib=st.none(),  # builds() would fill a NamedTuple's defaulted fields too
)
mixes = st.dictionaries(task_types, st.floats(0.1, 10), min_size=1, max_size=6)
shares = st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0]), max_size=8)
