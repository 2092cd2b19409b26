"""`enforcement: required` (issue 23): a fractional worker of such a job runs only on a
node that enforces GPU fractions (MPS), else the job waits saying so. Cases as data: the
node the job lands on, or the reason it waits, for one `schedule` call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pydantic
import pytest
from support.builders import assert_waits, job, node, queue, snapshot, state

from scheduler import model as m
from scheduler.core import cycle, invariants
from scheduler.placement.diagnose import diagnose
from scheduler.spec import Enforcement, JobSpec

R = m.ReasonCode
Q = [queue("q").obj()]
MPS = m.Enforcement.MPS


def _mps(name: str, gpus: int = 4) -> m.Node:
    return dataclasses.replace(node(name, gpus), enforcement=MPS)


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    pending: m.JobRequest
    lands_on: set[str] = field(default_factory=set)
    reason: R | None = None
    says: str = ""


HALF = job("j", "q").gpu(0.5).enforced().obj()
CASES = [
    Case("a fraction goes to the enforcing node", [node("a"), _mps("b")], HALF, {"b"}),
    Case("only advisory nodes: waits, saying why", [node("a"), node("b")], HALF,
         reason=R.NO_NODE, says="no node of an allowed type enforces GPU fractions"),
    Case("whole GPUs are exclusive anyway", [node("a")],
         job("j", "q").gpu(2).enforced().obj(), {"a"}),
    Case("not asked: advisory is fine", [node("a")], job("j", "q").gpu(0.5).obj(), {"a"}),
    Case("a gang spans enforcing nodes only", [node("a"), _mps("b", 1), _mps("c", 1)],
         job("j", "q").gpu(0.5).workers(2).distinct().enforced().obj(), {"b", "c"}),
    Case("the enforcing node is full: the numbers are its own", [node("a"), _mps("b", 1)],
         job("j", "q").gpu(0.5).workers(2).distinct().enforced().obj(),
         reason=R.DISTINCT_GPUS, says="1 of 2 workers"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_enforcement_required(case: Case) -> None:
    result = cycle.schedule(snapshot(case.nodes, Q, (), [case.pending]))
    if case.reason is not None:
        assert not result.places
        assert_waits(result, case.pending.id, case.reason, case.says)
        return
    (place,) = result.places
    assert {p.node for p in place.placements} == case.lands_on, place.placements


def test_an_advisory_fraction_of_a_required_job_is_drift() -> None:
    where = (m.WorkerPlacement(0, "a", (0,), 0.5),)
    for n, kinds in ((node("a"), ["fraction-not-enforced"]), (_mps("a"), [])):
        found = invariants.check(snapshot([n], Q, [m.RunningJob(HALF, where)]))
        assert [v.kind for v in found] == kinds


def test_diagnose_names_the_advisory_node() -> None:
    fits = {f.node: f for f in diagnose(state([node("a"), _mps("b")]), HALF)}
    assert fits["b"].fits and not fits["a"].fits
    assert "advisory" in fits["a"].reason


def test_the_spec_takes_required_and_refuses_anything_else() -> None:
    spec = JobSpec.model_validate(
        {"name": "j", "queue": "q", "image": "i", "gpu": 0.5, "enforcement": "required"}
    )
    assert spec.enforcement is Enforcement.REQUIRED
    with pytest.raises(pydantic.ValidationError) as err:
        JobSpec.model_validate({"name": "j", "queue": "q", "image": "i", "enforcement": "mps"})
    assert err.value.errors()[0]["loc"] == ("enforcement",)
