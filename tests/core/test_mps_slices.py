"""Nodes whose device plugin shares each GPU as N enforced MPS replicas (Kubernetes,
`nvidia.com/gpu.sharing-strategy=mps`): a fractional worker takes one replica (1/N of a
GPU), nothing larger fits there, and two ranks of one NCCL job never go to one such node
(the plugin, not Shoal, picks the replica's GPU). Cases as data, one `schedule` call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from support.builders import assert_waits, job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle, invariants

R = m.ReasonCode
Q = [queue("q").obj()]


def _sliced(name: str, gpus: int = 2, slices: int = 4) -> m.Node:
    return dataclasses.replace(node(name, gpus), enforcement=m.Enforcement.MPS, slices=slices)


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    pending: list[m.JobRequest]
    placed: dict[str, tuple[str, float]]  # job -> (node of every worker, fraction)
    reason: dict[str, tuple[R, str]] | None = None


def _j(i: int, gpu: float, **kw: object) -> m.JobRequest:
    b = job(f"j{i}", "q").gpu(gpu).submitted(i)
    for k, v in kw.items():
        b = getattr(b, k)(v)
    return b.obj()


CASES = [
    Case("a quarter takes one replica", [_sliced("s")], [_j(0, 0.25)], {"j0": ("s", 0.25)}),
    Case("a smaller fraction takes a whole replica", [_sliced("s")], [_j(0, 0.2)],
         {"j0": ("s", 0.25)}),
    Case("eight replicas on two GPUs, the ninth waits", [_sliced("s")],
         [_j(i, 0.25) for i in range(9)], {f"j{i}": ("s", 0.25) for i in range(8)},
         {"j8": (R.NO_NODE, "the most free GPU has 0 free")}),
    Case("half a GPU is more than a replica", [_sliced("s")], [_j(0, 0.5)], {},
         {"j0": (R.NO_NODE, "MPS replicas of 1/4")}),
    Case("whole GPUs are not offered", [_sliced("s")], [_j(0, 1.0)], {},
         {"j0": (R.NO_NODE, "MPS replicas of 1/4")}),
    Case("a half goes to the unshared node", [_sliced("s"), node("w", 2)], [_j(0, 0.5)],
         {"j0": ("w", 0.5)}),
    Case("thirds fill a GPU exactly", [_sliced("s", 1, 3)], [_j(i, 0.3) for i in range(3)],
         {f"j{i}": ("s", 0.333333333) for i in range(3)}),
    Case("two NCCL ranks never on one sliced node", [_sliced("s")],
         [_j(0, 0.25, workers=2, distinct=True)], {},
         {"j0": (R.DISTINCT_GPUS, "1 of 2 workers")}),
    Case("opted out, they may", [_sliced("s")], [_j(0, 0.25, workers=2, distinct=False)],
         {"j0": ("s", 0.25)}),
    Case("a memory request up to a replica's memory", [_sliced("s")],
         [job("j0", "q").gpu_memory(20_000).obj()], {"j0": ("s", 0.25)}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_mps_slices(case: Case) -> None:
    snap = snapshot(case.nodes, Q, (), case.pending)
    result = cycle.schedule(snap)
    got = {p.job_id: {(w.node, round(w.fraction, 9)) for w in p.placements} for p in result.places}
    assert got == {j: {want} for j, want in case.placed.items()}
    for j, (code, says) in (case.reason or {}).items():
        assert_waits(result, j, code, says)
    running = tuple(
        m.RunningJob(next(j for j in case.pending if j.id == p.job_id), p.placements)
        for p in result.places
    )
    assert not invariants.check(snapshot(case.nodes, Q, running)), "no GPU above 1.0"
