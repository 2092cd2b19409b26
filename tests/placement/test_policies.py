"""Each policy's choice of node and GPU, as a table, and the baselines' orders."""

from __future__ import annotations

import pytest

from scheduler import placement
from scheduler.core import model as m
from scheduler.placement import TaskType, WorkloadMix, baselines

from .builders import job, node, running, state

ONE_GPU = WorkloadMix({TaskType(gpu=1.0): 1.0})
THREE_QUARTERS = WorkloadMix({TaskType(gpu=0.75): 1.0})
OTHER = job("o", gpu=0.5)

# b comes first so that a choice of `a` is never the lowest-index tie-break.
B_IDLE_A_HALF = ([node("b"), node("a")], [running(OTHER, ("a", (0,), 0.5))])
A_QUARTER = ([node("a", gpus=2)], [running(OTHER, ("a", (0,), 0.25))])
CPU_AND_GPU: tuple[list[m.Node], list[m.RunningJob]] = (
    [node("g"), node("c", gpus=0, model="")],
    [],
)


@pytest.mark.parametrize(
    ("nodes", "runs", "j", "policy", "mix", "expected"),
    [
        pytest.param(*B_IDLE_A_HALF, job(gpu=0.5), "binpack", None, ("a", (0,)), id="binpack"),
        pytest.param(*B_IDLE_A_HALF, job(gpu=0.5), "spread", None, ("b", (0,)), id="spread"),
        pytest.param(
            *B_IDLE_A_HALF,
            job(gpu=0.5),
            "fgd",
            ONE_GPU,
            ("a", (0,)),
            id="fgd fills the half GPU a whole-GPU task could not use",
        ),
        pytest.param(*A_QUARTER, job(gpu=0.25), "binpack", None, ("a", (0,)), id="binpack gpu"),
        pytest.param(
            *A_QUARTER,
            job(gpu=0.25),
            "fgd",
            THREE_QUARTERS,
            ("a", (1,)),
            id="fgd keeps 0.75 free on GPU 0 for 0.75 tasks",
        ),
        pytest.param(*A_QUARTER, job(gpu=0.25), "spread", None, ("a", (1,)), id="spread gpu"),
        pytest.param(
            *CPU_AND_GPU,
            job(gpu=0),
            "binpack",
            None,
            ("c", ()),
            id="CPU-only work keeps off GPU nodes",
        ),
        pytest.param(
            [node("x"), node("y")],
            [],
            job(gpu=1),
            "fgd",
            ONE_GPU,
            ("x", (0,)),
            id="ties go to the lowest node",
        ),
    ],
)
def test_policy_picks(
    nodes: list[m.Node],
    runs: list[m.RunningJob],
    j: m.JobRequest,
    policy: str,
    mix: WorkloadMix | None,
    expected: tuple[str, tuple[int, ...]],
) -> None:
    got = placement.place_gang(state(nodes, runs), j, policy, mix)
    assert isinstance(got, tuple)
    assert (got[0].node, got[0].gpus) == expected


def test_fgd_uses_the_state_mix_when_none_is_given() -> None:
    s = state(*A_QUARTER)
    s.mix = THREE_QUARTERS
    got = placement.place_gang(s, job(gpu=0.25), "fgd")
    assert isinstance(got, tuple) and got[0].gpus == (1,)


PACK = [node("idle8", gpus=8), node("idle2", gpus=2), node("used"), node("shared")]
PACK_RUNS = [
    running(job("u", gpu=1), ("used", (0,), 1.0)),
    running(job("s", gpu=0.5), ("shared", (2,), 0.5)),
]


@pytest.mark.parametrize(
    ("scorer", "j", "expected"),
    [
        pytest.param(baselines.GpuPacking(), job(gpu=0.5), ("shared", (2,)), id="packing shared"),
        pytest.param(baselines.GpuPacking(), job(gpu=1), ("used", (1,)), id="packing used node"),
        pytest.param(
            baselines.BestFit(), job(gpu=0.5), ("idle2", (0,)), id="best-fit: least left over"
        ),
        pytest.param(baselines.DotProduct(), job(gpu=0.5), ("shared", (2,)), id="dot-product"),
        pytest.param(
            baselines.GpuClustering(), job(gpu=0.5), ("shared", (2,)), id="clustering same shape"
        ),
        pytest.param(
            baselines.GpuClustering(), job(gpu=2), ("idle2", (0, 1)), id="clustering idle node"
        ),
    ],
)
def test_baseline_choice(
    scorer: placement.Scorer, j: m.JobRequest, expected: tuple[str, tuple[int, ...]]
) -> None:
    got = placement.place_gang(state(PACK, PACK_RUNS), j, scorer)
    assert isinstance(got, tuple)
    assert (got[0].node, got[0].gpus) == expected


def test_gpu_packing_takes_the_smallest_idle_node() -> None:
    got = placement.place_gang(state(PACK[:2]), job(gpu=1), baselines.GpuPacking())
    assert isinstance(got, tuple) and got[0].node == "idle2"


def test_random_fit_is_seeded() -> None:
    nodes = [node(f"n{i}") for i in range(20)]

    def picks(seed: int) -> list[str]:
        scorer = baselines.RandomFit(seed)
        out = []
        for _ in range(10):
            got = placement.place_gang(state(nodes), job(gpu=1), scorer)
            assert isinstance(got, tuple)
            out.append(got[0].node)
        return out

    assert picks(1) == picks(1)
    assert len(set(picks(1))) > 1
