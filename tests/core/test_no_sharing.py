"""A node where GPU sharing does not work now (`Node.no_sharing`: on Kubernetes, a GPU
reservation found no GPU in its container) holds no fractional worker, and still holds
whole GPUs and CPU-only workers; a fraction with nowhere else to go waits with the reason
in words. Cases as data, one `schedule` call each (issue 24)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from support.builders import assert_waits, job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle, explain

R = m.ReasonCode
Q = [queue("q").obj()]
WHY = "GPU reservation shoal-gpu-off-g0 found no GPU (no NVML)"


def _off(name: str, gpus: int = 8) -> m.Node:
    return dataclasses.replace(node(name, gpus), no_sharing=WHY)


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    pending: list[m.JobRequest]
    placed: dict[str, str]  # job -> the node of its workers
    reason: dict[str, tuple[R, str]] | None = None


def _j(i: int, gpu: float) -> m.JobRequest:
    return job(f"j{i}", "q").gpu(gpu).submitted(i).obj()


CASES = [
    Case("whole GPUs still go there", [_off("off")], [_j(0, 8.0)], {"j0": "off"}),
    Case("one whole GPU too", [_off("off")], [_j(0, 1.0)], {"j0": "off"}),
    Case("CPU-only workers too", [_off("off")], [_j(0, 0.0)], {"j0": "off"}),
    Case("a fraction does not, and says why", [_off("off")], [_j(0, 0.5)], {},
         {"j0": (R.NO_NODE, f"GPU sharing is off on every node that could hold it "
                            f"(whole GPUs are still offered there): off: {WHY}")}),
    Case("a memory request neither (never 'None MiB')", [_off("off")],
         [job("j0", "q").gpu_memory(20_000).obj()], {},
         {"j0": (R.NO_NODE, "needs 20000 MiB of one GPU; GPU sharing is off")}),
    Case("a fraction goes to a node that shares", [_off("off"), node("on", 2)],
         [_j(0, 0.5)], {"j0": "on"}),
    Case("beside a whole-GPU job on the node", [_off("off")], [_j(0, 4.0), _j(1, 0.25)],
         {"j0": "off"}, {"j1": (R.NO_NODE, "GPU sharing is off")}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_sharing(case: Case) -> None:
    snap = snapshot(case.nodes, Q, (), case.pending)
    result = cycle.schedule(snap)
    got = {p.job_id: {w.node for w in p.placements} for p in result.places}
    assert got == {j: {n} for j, n in case.placed.items()}
    reasons = {k.job_id: k.reason for k in result.pending}
    assert set(reasons) == {j.id for j in case.pending} - set(case.placed)
    for j, (code, says) in (case.reason or {}).items():
        assert_waits(result, j, code, says)


def test_explain_names_the_node_where_sharing_is_off() -> None:
    snap = snapshot([_off("off")], Q, (), [_j(0, 0.5)])
    fits = {c.node: c for c in explain.explain(snap, "j0").candidates}
    assert not fits["off"].fits and "GPU sharing is off" in fits["off"].reason
