"""Gang placement: all workers or none, on as few nodes as possible, and the reasons."""

from __future__ import annotations

import pytest

from scheduler import model as m
from scheduler import placement

from .builders import job, node, running, snapshot, state

R = m.ReasonCode


def nodes_of(got: object) -> list[str]:
    assert isinstance(got, tuple), got
    return [p.node for p in got]


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_whole_gang_on_one_node_when_one_holds_it(policy: str) -> None:
    s = state([node("small", gpus=2), node("big", gpus=4)])
    got = placement.place_gang(s, job(gpu=1, workers=4), policy)
    assert nodes_of(got) == ["big"] * 4
    assert isinstance(got, tuple)
    assert sorted(g for p in got for g in p.gpus) == [0, 1, 2, 3]
    assert [p.worker for p in got] == [0, 1, 2, 3]


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_fewest_nodes(policy: str) -> None:
    s = state([node("n2", gpus=2), node("a4"), node("b4"), node("c2", gpus=2)])
    got = placement.place_gang(s, job(gpu=1, workers=6), policy)
    assert len(set(nodes_of(got))) == 2


def test_fractional_gang_shares_gpus_on_one_node() -> None:
    s = state([node("a", gpus=1), node("b", gpus=2)])
    got = placement.place_gang(s, job(gpu=0.5, workers=4), "binpack")
    assert nodes_of(got) == ["b"] * 4


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_all_or_nothing(policy: str) -> None:
    s = state([node("a", gpus=2)])
    before = snapshot(s)
    got = placement.place_gang(s, job(gpu=1, workers=3), policy)
    assert isinstance(got, m.PendingReason)
    assert got.code is R.NO_NODE
    assert "only 2 fit" in got.message
    assert snapshot(s) == before


def test_place_gang_does_not_change_the_state() -> None:
    s = state([node("a"), node("b")])
    before = snapshot(s)
    got = placement.place_gang(s, job(gpu=1, workers=6), "fgd")
    assert isinstance(got, tuple) and len(got) == 6
    assert snapshot(s) == before
    s.allocate("j", got)
    assert s.allocated_gpu_share() == 6


HALF_USED_8 = [
    running(job("x", gpu=4), ("a", (0, 1, 2, 3), 1.0)),
    running(job("y", gpu=4), ("b", (4, 5, 6, 7), 1.0)),
]


@pytest.mark.parametrize(
    ("nodes", "runs", "j", "code", "words"),
    [
        pytest.param(
            [node("a", gpus=8), node("b", gpus=8)],
            HALF_USED_8,
            job(gpu=8),
            R.FRAGMENTATION,
            "needs 8 GPUs on one node; the largest free block is 4",
            id="whole GPUs fragmented",
        ),
        pytest.param(
            [node("a", gpus=4)],
            [],
            job(gpu=8),
            R.NO_NODE,
            "needs 8 GPUs on one node; the largest node of an allowed type has 4",
            id="no node that large",
        ),
        pytest.param(
            [node("a", gpus=2)],
            [running(job("x", gpu=0.7), ("a", (0,), 0.7), ("a", (1,), 0.7))],
            job(gpu=0.5),
            R.FRAGMENTATION,
            "the most free GPU has 0.3",
            id="fraction fragmented",
        ),
        pytest.param(
            [node("a", gpus=1)],
            [running(job("x", gpu=0.7), ("a", (0,), 0.7))],
            job(gpu=0.5),
            R.NO_NODE,
            "the most free GPU has 0.3",
            id="not enough share at all",
        ),
        pytest.param(
            [node("a", model="T4")],
            [],
            job(gpu=1, types=["H100"]),
            R.GPU_TYPE,
            "needs GPU type H100; the cluster has T4",
            id="GPU type",
        ),
        pytest.param(
            [node("a", gpu_mem=16_384)],
            [],
            job(gpu_mem=40_000),
            R.NO_NODE,
            "the largest GPU of an allowed type has 16384 MiB",
            id="GPU memory",
        ),
        pytest.param(
            [node("a", cpu=4000)],
            [],
            job(gpu=1, cpu=8000),
            R.NO_NODE,
            "needs 8000m CPU",
            id="CPU",
        ),
    ],
)
def test_failure_reasons(
    nodes: list[m.Node], runs: list[m.RunningJob], j: m.JobRequest, code: R, words: str
) -> None:
    got = placement.place_gang(state(nodes, runs), j, "fgd")
    assert isinstance(got, m.PendingReason)
    assert got.code is code
    assert words in got.message
    assert isinstance(got.details, dict) and got.details["workers"] == 1


def test_diagnose_ranks_fitting_nodes_first() -> None:
    s = state([node("t4", model="T4", gpus=2), node("full"), node("ok")],
              [running(job("x", gpu=4), ("full", (0, 1, 2, 3), 1.0))])  # fmt: skip
    fits = placement.diagnose(s, job(gpu=1, types=["A100"], workers=2), top=3)
    assert [(f.node, f.fits) for f in fits] == [("ok", True), ("full", False), ("t4", False)]
    assert fits[0].reason == "fits 2 of 2 workers"
    assert fits[1].reason == "needs 1 free GPU; 0 of 4 are free"
    assert "GPU type T4" in fits[2].reason
