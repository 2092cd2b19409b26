"""Gang placement: all workers or none, on as few nodes as possible, and the reasons."""

from __future__ import annotations

import pytest
from support.builders import a100, observe, request, running, state

from scheduler import model as m
from scheduler import placement

R = m.ReasonCode


def nodes_of(got: object) -> list[str]:
    assert isinstance(got, tuple), got
    return [p.node for p in got]


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_whole_gang_on_one_node_when_one_holds_it(policy: str) -> None:
    s = state([a100("small", gpus=2), a100("big", gpus=4)])
    got = placement.place_gang(s, request(gpu=1, workers=4), policy)
    assert nodes_of(got) == ["big"] * 4
    assert isinstance(got, tuple)
    assert sorted(g for p in got for g in p.gpus) == [0, 1, 2, 3]
    assert [p.worker for p in got] == [0, 1, 2, 3]


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_fewest_nodes(policy: str) -> None:
    s = state([a100("n2", gpus=2), a100("a4"), a100("b4"), a100("c2", gpus=2)])
    got = placement.place_gang(s, request(gpu=1, workers=6), policy)
    assert len(set(nodes_of(got))) == 2


def test_fractional_gang_shares_gpus_on_one_node() -> None:
    s = state([a100("a", gpus=1), a100("b", gpus=2)])
    got = placement.place_gang(s, request(gpu=0.5, workers=4), "binpack")
    assert nodes_of(got) == ["b"] * 4


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_all_or_nothing(policy: str) -> None:
    s = state([a100("a", gpus=2)])
    before = observe(s)
    got = placement.place_gang(s, request(gpu=1, workers=3), policy)
    assert isinstance(got, m.PendingReason)
    assert got.code is R.NO_NODE
    assert "only 2 fit" in got.message
    assert observe(s) == before


def test_place_gang_does_not_change_the_state() -> None:
    s = state([a100("a"), a100("b")])
    before = observe(s)
    got = placement.place_gang(s, request(gpu=1, workers=6), "fgd")
    assert isinstance(got, tuple) and len(got) == 6
    assert observe(s) == before
    s.allocate("j", got)
    assert s.allocated_gpu_share() == 6


HALF_USED_8 = [
    running(request("x", gpu=4), ("a", (0, 1, 2, 3), 1.0)),
    running(request("y", gpu=4), ("b", (4, 5, 6, 7), 1.0)),
]


@pytest.mark.parametrize(
    ("nodes", "runs", "j", "code", "words"),
    [
        pytest.param(
            [a100("a", gpus=8), a100("b", gpus=8)],
            HALF_USED_8,
            request(gpu=8),
            R.FRAGMENTATION,
            "needs 8 GPUs on one node; the largest free block is 4",
            id="whole GPUs fragmented",
        ),
        pytest.param(
            [a100("a", gpus=4)],
            [],
            request(gpu=8),
            R.NO_NODE,
            "needs 8 GPUs on one node; the largest node of an allowed type has 4",
            id="no node that large",
        ),
        pytest.param(
            [a100("a", gpus=2)],
            [running(request("x", gpu=0.7), ("a", (0,), 0.7), ("a", (1,), 0.7))],
            request(gpu=0.5),
            R.FRAGMENTATION,
            "the most free GPU has 0.3",
            id="fraction fragmented",
        ),
        pytest.param(
            [a100("a", gpus=1)],
            [running(request("x", gpu=0.7), ("a", (0,), 0.7))],
            request(gpu=0.5),
            R.NO_NODE,
            "the most free GPU has 0.3",
            id="not enough share at all",
        ),
        pytest.param(
            [a100("a", model="T4")],
            [],
            request(gpu=1, types=["H100"]),
            R.GPU_TYPE,
            "needs GPU type H100; the cluster has T4",
            id="GPU type",
        ),
        pytest.param(
            [a100("a", gpu_mem=16_384)],
            [],
            request(gpu_mem=40_000),
            R.NO_NODE,
            "the largest GPU of an allowed type has 16384 MiB",
            id="GPU memory",
        ),
        pytest.param(
            [a100("a", cpu=4000)],
            [],
            request(gpu=1, cpu=8000),
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
    s = state([a100("t4", model="T4", gpus=2), a100("full"), a100("ok")],
              [running(request("x", gpu=4), ("full", (0, 1, 2, 3), 1.0))])  # fmt: skip
    fits = placement.diagnose(s, request(gpu=1, types=["A100"], workers=2), top=3)
    assert [(f.node, f.fits) for f in fits] == [("ok", True), ("full", False), ("t4", False)]
    assert fits[0].reason == "fits all 2 workers"
    assert fits[1].reason == "needs 1 free GPU; 0 of 4 are free"
    assert "GPU type T4" in fits[2].reason
