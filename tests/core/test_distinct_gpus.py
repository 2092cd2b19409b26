"""The distinct-GPU rule (DESIGN.md "Scheduling semantics" 4): one GPU holds at most one
worker of a job whose workers are NCCL ranks, unless the job opted out. Cases as data:
where the gang lands, or the reason it waits, for one `schedule` call."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
from support.builders import assert_waits, job, node, observe, on, queue, snapshot, state

from scheduler import model as m
from scheduler.core import cycle, invariants
from scheduler.placement import place_gang
from scheduler.placement.diagnose import diagnose
from scheduler.spec import Framework, JobSpec

R = m.ReasonCode
Q = [queue("q").obj()]


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    pending: m.JobRequest
    running: list[m.RunningJob] = field(default_factory=list)
    # Placed: the most workers of the job any one GPU holds. Waiting: the reason.
    most_per_gpu: int | None = None
    reason: R | None = None
    says: str = ""


def _ddp(workers: int, gpu: float = 0.5, distinct: bool = True) -> m.JobRequest:
    return job("ddp", "q").gpu(gpu).workers(workers).distinct(distinct).obj()


CASES = [
    Case("two halves take two GPUs", [node("n0", 4)], _ddp(2), most_per_gpu=1),
    Case("opted out, two halves share one GPU", [node("n0", 4)], _ddp(2, distinct=False),
         most_per_gpu=2),
    Case("one GPU: waits with the reason, naming the GPU", [node("n0", 1)], _ddp(2),
         reason=R.DISTINCT_GPUS, says="2 free fractions on n0 gpu0 count once"),
    Case("one GPU, opted out: both on it", [node("n0", 1)], _ddp(2, distinct=False),
         most_per_gpu=2),
    Case("four quarters over two 2-GPU nodes", [node("n0", 2), node("n1", 2)],
         _ddp(4, 0.25), most_per_gpu=1),
    Case("GPU memory requests are fractions too", [node("n0", 2)],
         job("ddp", "q").gpu_memory(20_000).workers(2).distinct().obj(), most_per_gpu=1),
    Case("whole GPUs were always distinct", [node("n0", 4)], _ddp(2, 1.0), most_per_gpu=1),
    Case("a busy GPU's rest does not count twice", [node("n0", 2)], _ddp(3, 0.25),
         reason=R.DISTINCT_GPUS, says="of 3 workers"),
    Case("room on other GPUs is used", [node("n0", 3)], _ddp(2, 0.5),
         running=[on(job("other", "q").gpu(0.5).obj(), "n0", first_gpu=0)], most_per_gpu=1),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_distinct_gpus(case: Case) -> None:
    snap = snapshot(case.nodes, Q, case.running, [case.pending])
    result = cycle.schedule(snap)
    if case.reason is not None:
        assert not result.places
        assert_waits(result, case.pending.id, case.reason, case.says)
        return
    (place,) = result.places
    per_gpu = Counter((p.node, g) for p in place.placements for g in p.gpus)
    assert max(per_gpu.values()) == case.most_per_gpu, place.placements
    assert len(place.placements) == case.pending.workers


def test_a_shared_gpu_is_drift_only_for_a_distinct_job() -> None:
    shared = (m.WorkerPlacement(0, "n0", (0,), 0.5), m.WorkerPlacement(1, "n0", (0,), 0.5))
    for distinct, kinds in ((True, ["distinct-gpus-shared"]), (False, [])):
        run = m.RunningJob(_ddp(2, distinct=distinct), shared)
        found = invariants.check(snapshot([node("n0", 1)], Q, [run]))
        assert [v.kind for v in found] == kinds


def test_diagnose_counts_one_worker_per_gpu() -> None:
    s = state([node("n0", 2)])
    (fit,) = diagnose(s, _ddp(4, 0.25))
    assert fit.reason == (
        "room for 2 of its 4 workers, each on a GPU of its own; all must fit at once"
    )
    (shared,) = diagnose(s, _ddp(4, 0.25, distinct=False))
    assert shared.reason == "fits all 4 workers"


def test_a_failed_trial_leaves_the_state_as_it_was() -> None:
    s = state([node("n0", 2), node("n1", 1)])
    before = observe(s)
    got = place_gang(s, _ddp(4, 0.25), m.Policy.FGD)
    assert isinstance(got, m.PendingReason) and got.code is R.DISTINCT_GPUS
    assert observe(s) == before


@pytest.mark.parametrize(
    ("framework", "given", "expected"),
    [
        (Framework.PYTORCH, None, True),
        (Framework.TENSORFLOW, None, True),
        (Framework.MPI, None, False),
        (Framework.GENERIC, None, False),
        (Framework.PYTORCH, False, False),
        (Framework.GENERIC, True, True),
    ],
)
def test_the_default_follows_the_framework(
    framework: Framework, given: bool | None, expected: bool
) -> None:
    spec = JobSpec(name="j", queue="q", image="img", framework=framework, distinct_gpus=given)
    assert spec.gpus_distinct is expected
