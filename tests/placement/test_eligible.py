"""Node selectors, node affinity and tolerations: which nodes a job may use, the
preferred ones first, and the reason when none will do (issue 24 item 1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler import model as m
from scheduler.placement import eligible, place_gang
from scheduler.placement.state import ClusterState

H100 = m.Node("h100", 64_000, 262_144, 8, "H100", 81_920, labels={"gpu": "h100", "zone": "a"})
A100 = m.Node("a100", 64_000, 262_144, 8, "A100", 40_960, labels={"gpu": "a100", "zone": "b"})
SPOT = replace(
    m.Node("spot", 64_000, 262_144, 8, "A100", 40_960, labels={"gpu": "a100", "zone": "c"}),
    taints=(m.Taint("spot", "true", "NoSchedule"),),
)


MISS = "didn't match the node affinity"
TAINTED = "had untolerated taint {spot=true: NoSchedule}"
NO_EXECUTE = m.Toleration("spot", "Exists", "", "NoExecute")


def req(key: str, op: str, *values: str, field: bool = False) -> m.Requirement:
    return m.Requirement(key, op, values, field)


def affinity(*terms: m.Term) -> m.NodeRules:
    return m.NodeRules(required=(terms,))


@pytest.mark.parametrize(
    ("rules", "node", "refusal"),
    [
        (None, H100, None),
        (None, SPOT, TAINTED),
        (m.NodeRules(selector=(("gpu", "h100"),)), H100, None),
        (m.NodeRules(selector=(("gpu", "h100"),)), A100, "didn't match the node selector"),
        (affinity((req("gpu", "In", "h100", "b200"),)), H100, None),
        (affinity((req("gpu", "NotIn", "h100"),)), H100, MISS),
        (affinity((req("rack", "Exists"),)), H100, MISS),
        (affinity((req("rack", "DoesNotExist"),)), H100, None),
        # Terms are ORed, requirements within a term ANDed.
        (affinity((req("gpu", "In", "x"),), (req("zone", "In", "a"),)), H100, None),
        (affinity((req("gpu", "In", "h100"), req("zone", "In", "b"))), H100, MISS),
        (affinity(()), H100, MISS),  # an empty term matches nothing
        (affinity((req("metadata.name", "In", "a100", field=True),)), A100, None),
        (affinity((req("metadata.name", "In", "a100", field=True),)), H100, MISS),
        (m.NodeRules(tolerations=(m.Toleration("spot", "Equal", "true"),)), SPOT, None),
        (m.NodeRules(tolerations=(m.Toleration("spot", "Equal", "no"),)), SPOT, TAINTED),
        (m.NodeRules(tolerations=(m.Toleration(operator="Exists"),)), SPOT, None),
        (m.NodeRules(tolerations=(NO_EXECUTE,)), SPOT, TAINTED),
        (m.NodeRules(blocked="pvc data is not bound"), H100, "pvc data is not bound"),
    ],
)  # fmt: skip
def test_refusal(rules: m.NodeRules | None, node: m.Node, refusal: str | None) -> None:
    assert eligible.refusal(rules, node) == refusal


@pytest.mark.parametrize(
    ("value", "op", "bound", "holds"),
    [
        ("8", "Gt", "4", True),
        ("4", "Gt", "4", False),
        ("2", "Lt", "4", True),
        ("x", "Gt", "1", False),
    ],
)
def test_numeric_requirements(value: str, op: str, bound: str, holds: bool) -> None:
    node = replace(H100, labels={"gpus": value})
    assert eligible.matches((req("gpus", op, bound),), node) is holds


def job(rules: m.NodeRules | None, workers: int = 1, gpu: float = 1.0) -> m.JobRequest:
    return m.JobRequest("j", "q", workers=workers, gpu=gpu, cpu_milli=1_000, nodes=rules)


def test_a_selector_keeps_every_worker_of_a_gang_on_matching_nodes() -> None:
    h2 = replace(H100, name="h100-2")
    state = ClusterState([A100, H100, h2])
    got = place_gang(state, job(m.NodeRules(selector=(("gpu", "h100"),)), workers=3, gpu=4), "fgd")
    assert isinstance(got, tuple)
    assert {p.node for p in got} == {"h100", "h100-2"}


def test_preferred_nodes_first_then_the_others() -> None:
    prefer_b = m.NodeRules(preferred=((10, (req("zone", "In", "b"),)),))
    state = ClusterState([H100, A100])
    first = place_gang(state, job(prefer_b, gpu=8), "binpack")
    assert isinstance(first, tuple) and first[0].node == "a100"
    state.allocate("first", first)
    second = place_gang(state, job(prefer_b, gpu=8), "binpack")  # zone b is full now
    assert isinstance(second, tuple) and second[0].node == "h100"


def test_a_prefer_no_schedule_taint_ranks_a_node_last() -> None:
    soft = replace(A100, name="soft", taints=(m.Taint("busy", "", "PreferNoSchedule"),))
    got = place_gang(ClusterState([soft, A100]), job(None), "binpack")
    assert isinstance(got, tuple) and got[0].node == "a100"


def test_no_allowed_node_says_why_per_node_as_kube_scheduler_does() -> None:
    rules = m.NodeRules(selector=(("gpu", "b200"),))
    why = place_gang(ClusterState([H100, A100, SPOT]), job(rules), "fgd")
    assert isinstance(why, m.PendingReason)
    assert why.code is m.ReasonCode.NODE_RULES
    assert why.message == (
        "0/3 nodes are available: 2 node(s) didn't match the node selector, "
        "1 node(s) had untolerated taint {spot=true: NoSchedule}"
    )
    assert not why.code.preemption_may_help


def test_a_full_allowed_node_is_explained_on_the_allowed_nodes_only() -> None:
    state = ClusterState([H100, A100])
    state.allocate("other", (m.WorkerPlacement(0, "h100", tuple(range(8))),), job(None))
    why = place_gang(state, job(m.NodeRules(selector=(("gpu", "h100"),))), "fgd")
    assert isinstance(why, m.PendingReason)
    assert why.code is m.ReasonCode.NO_NODE
    assert why.message.startswith("on the 1 of 2 nodes its node rules allow: needs 1 GPU")
    assert "0 free" in why.message  # the A100's 8 free GPUs are not counted


def test_a_blocked_job_waits_with_its_reason() -> None:
    rules = m.NodeRules(blocked="uses ResourceClaim gpu-claim, which Shoal does not allocate")
    why = place_gang(ClusterState([H100]), job(rules), "fgd")
    assert isinstance(why, m.PendingReason) and why.code is m.ReasonCode.NODE_RULES
    assert why.message == rules.blocked


def expr(key: str, op: str, values: list[str] | None = None) -> dict[str, object]:
    return {"key": key, "operator": op, **({"values": values} if values else {})}


def test_rules_from_the_kubernetes_shapes() -> None:
    got = eligible.rules(
        {"gpu": "h100"},
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [expr("zone", "In", ["a"])]},
                        {"matchFields": [expr("metadata.name", "In", ["x"])]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "preference": {"matchExpressions": [expr("r", "Exists")]}}
                ],
            }
        },
        [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    )  # fmt: skip
    assert got == m.NodeRules(
        selector=(("gpu", "h100"),),
        required=(((req("zone", "In", "a"),), (req("metadata.name", "In", "x", field=True),)),),
        preferred=((7, (req("r", "Exists"),)),),
        tolerations=(m.Toleration("spot", "Exists", effect="NoSchedule"),),
    )
    assert eligible.rules({}, None, []) is None
    both = eligible.also(got, m.NodeRules(tolerations=(m.Toleration("x", "Exists"),)))
    assert both is not None and len(both.tolerations) == 2 and both.selector == got.selector
