"""A node whose GPUs Shoal does not offer (`Node.withheld`: on Kubernetes, DRA devices
outside Shoal's node pool, which kube-scheduler allocates) counts no GPU; a GPU job that
waits says which node withholds them and why, a CPU-only job still goes there. Cases as
data, one `schedule` call each (issue 36)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from support.builders import assert_waits, job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

R = m.ReasonCode
Q = [queue("q").obj()]
WHY = "node kw-r1: its GPUs are DRA devices outside Shoal's node pool"


def _withheld(name: str) -> m.Node:
    return dataclasses.replace(node(name, 0), withheld=f"node {name}: its GPUs are DRA "
                               "devices outside Shoal's node pool")  # fmt: skip


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    pending: list[m.JobRequest]
    placed: dict[str, str]  # job -> the node of its workers
    reason: dict[str, str] | None = None  # job -> what its reason says


def _j(i: int, gpu: float) -> m.JobRequest:
    return job(f"j{i}", "q").gpu(gpu).submitted(i).obj()


CASES = [
    Case("a GPU job waits and names the node", [_withheld("kw-r1")], [_j(0, 1.0)], {},
         {"j0": WHY}),
    Case("a fraction too", [_withheld("kw-r1")], [_j(0, 0.5)], {}, {"j0": WHY}),
    Case("a CPU-only job goes there", [_withheld("kw-r1")], [_j(0, 0.0)], {"j0": "kw-r1"}),
    Case("a pool node full: both said", [_withheld("kw-r1"), node("pool", 1)],
         [_j(0, 1.0), _j(1, 1.0)], {"j0": "pool"}, {"j1": WHY}),
    Case("several withheld: one named, the rest counted",
         [_withheld("kw-r1"), _withheld("kw-r2")], [_j(0, 1.0)], {},
         {"j0": f"{WHY} (and 1 more such node(s))"}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_withheld_gpus(case: Case) -> None:
    snap = snapshot(case.nodes, Q, (), case.pending)
    result = cycle.schedule(snap)
    got = {p.job_id: {w.node for w in p.placements} for p in result.places}
    assert got == {j: {n} for j, n in case.placed.items()}
    for j, says in (case.reason or {}).items():
        assert_waits(result, j, R.NO_NODE, says)
