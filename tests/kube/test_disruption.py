"""Which PodDisruptionBudgets hold which pods (`disruption`): policy/v1 selectors, and a
budget that allows no disruption now, read as kube-apiserver judges an eviction."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.backends.kubernetes.pods import disruption

Obj = dict[str, Any]
LABELS = {"shoal.dev/job": "a", "team": "vision"}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        pytest.param({}, True, id="empty: every pod of the namespace"),
        pytest.param(None, False, id="missing: none"),
        pytest.param({"matchLabels": {"shoal.dev/job": "a"}}, True, id="matchLabels"),
        pytest.param({"matchLabels": {"shoal.dev/job": "b"}}, False, id="matchLabels other"),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["vision"]}]},
            True,
            id="In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["vision"]}]},
            False,
            id="NotIn",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "nope", "operator": "NotIn", "values": ["x"]}]},
            True,
            id="NotIn of an absent key",
        ),
        pytest.param({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, True, id="Ex"),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False, id="DNE"
        ),
        pytest.param(
            {
                "matchLabels": {"team": "vision"},
                "matchExpressions": [{"key": "shoal.dev/job", "operator": "In", "values": ["b"]}],
            },
            False,
            id="both must hold",
        ),
    ],
)
def test_selectors(selector: Obj | None, selected: bool) -> None:
    assert disruption.selects(selector, LABELS) is selected


def pdb(allowed: int, generation: int = 1, observed: int = 1, conditions: Any = ()) -> Obj:
    return {
        "metadata": {"name": "keep", "namespace": "jobs", "generation": generation},
        "spec": {"selector": {"matchLabels": {"shoal.dev/job": "a"}}},
        "status": {
            "observedGeneration": observed,
            "disruptionsAllowed": allowed,
            "conditions": list(conditions),
        },
    }


def test_a_budget_allows_none_when_at_zero_or_not_yet_judged() -> None:
    assert disruption.allows_none(pdb(0))
    assert not disruption.allows_none(pdb(1))
    # Changed since the disruption controller last judged it: the API server refuses.
    assert disruption.allows_none(pdb(1, generation=2, observed=1))
    why = "trainingjobs.shoal.dev does not implement the scale subresource"
    failed = {
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "SyncFailed",
        "message": why,
    }
    assert disruption.describe(pdb(0, conditions=[failed])) == (
        f"jobs/keep: allows no disruption now; SyncFailed: {why}"
    )
