"""Fit rules, as a table: which node and GPUs one worker gets, or that it fits nowhere."""

from __future__ import annotations

import pytest
from support.builders import a100, request, running, state

from scheduler import model as m
from scheduler import placement
from scheduler.placement import fit

A = a100("a", gpus=2, model="T4", gpu_mem=16_384)
B = a100("b", gpus=4, model="A100", gpu_mem=40_960)
HALF = request("h", gpu=0.5)


@pytest.mark.parametrize(
    ("nodes", "runs", "j", "expected"),
    [
        pytest.param([A], [], request(gpu=0.5), [("a", (0,), 0.5)], id="fraction takes one GPU"),
        pytest.param(
            [A],
            [running(HALF, ("a", (0,), 0.75))],
            request(gpu=0.5),
            [("a", (1,), 0.5)],
            id="fraction never spans GPUs",
        ),
        pytest.param(
            [A],
            [running(HALF, ("a", (0,), 0.75), ("a", (1,), 0.75))],
            request(gpu=0.5),
            None,
            id="0.25 + 0.25 free is not 0.5",
        ),
        pytest.param(
            [A],
            [running(HALF, ("a", (0,), 0.75))],
            request(gpu=0.25),
            [("a", (0,), 0.25)],
            id="exact fill of a shared GPU",
        ),
        pytest.param([A], [], request(gpu=2), [("a", (0, 1), 1.0)], id="whole GPUs on one node"),
        pytest.param(
            [A],
            [running(HALF, ("a", (0,), 0.1))],
            request(gpu=2),
            None,
            id="whole GPUs must be fully free",
        ),
        pytest.param([A], [], request(gpu=3), None, id="more GPUs than the node has"),
        pytest.param(
            [A, B], [], request(gpu=3), [("b", (0, 1, 2), 1.0)], id="the node that has them"
        ),
        pytest.param(
            [A],
            [],
            request(gpu_mem=8_192),
            [("a", (0,), 0.5)],
            id="gpu memory is a fraction",
        ),
        pytest.param(
            [A],
            [],
            request(gpu_mem=16_384),
            [("a", (0,), 1.0)],
            id="all of the GPU's memory",
        ),
        pytest.param([A], [], request(gpu_mem=20_000), None, id="more memory than the GPU has"),
        pytest.param(
            [A, B],
            [],
            request(gpu_mem=20_000),
            [("b", (0,), 20_000 / 40_960)],
            id="memory fraction of the chosen GPU",
        ),
        pytest.param([A, B], [], request(gpu=1, types=["A100"]), [("b", (0,), 1.0)], id="GPU type"),
        pytest.param([A], [], request(gpu=1, types=["H100"]), None, id="GPU type unmet"),
        pytest.param([A], [], request(cpu=10**6), None, id="CPU must fit"),
        pytest.param([A], [], request(mem=10**7), None, id="memory must fit"),
        pytest.param([A], [], request(gpu=0), [("a", (), 1.0)], id="CPU-only worker, no GPU"),
    ],
)
def test_fit_rules(
    nodes: list[m.Node],
    runs: list[m.RunningJob],
    j: m.JobRequest,
    expected: list[tuple[str, tuple[int, ...], float]] | None,
) -> None:
    for policy in ("binpack", "fgd"):
        got = placement.place_gang(state(nodes, runs), j, policy)
        if expected is None:
            assert isinstance(got, m.PendingReason), policy
        else:
            assert isinstance(got, tuple), (policy, got)
            assert [(p.node, p.gpus) for p in got] == [(n, g) for n, g, _ in expected]
            assert [p.fraction for p in got] == pytest.approx([f for _, _, f in expected])


@pytest.mark.parametrize(
    ("j", "n", "share"),
    [
        (request(gpu=0.25), B, 0.25),
        (request(gpu=2), B, 2.0),
        (request(gpu_mem=10_240), B, 0.25),
        (request(gpu_mem=81_920), B, 1.0),  # capped; it does not fit, but the share is 1
    ],
)
def test_worker_gpu_share(j: m.JobRequest, n: m.Node, share: float) -> None:
    assert placement.worker_gpu_share(j, n) == pytest.approx(share)


def test_capacity_counts_workers_per_node() -> None:
    s = state([B])
    sig = s.sig[0]
    assert fit.capacity(fit.Demand.of(request(gpu=0.3, cpu=0, mem=0)), sig, 99) == 12
    assert fit.capacity(fit.Demand.of(request(gpu=2, cpu=0, mem=0)), sig, 99) == 2
    assert fit.capacity(fit.Demand.of(request(gpu=0.5, cpu=16_000, mem=0)), sig, 99) == 4
