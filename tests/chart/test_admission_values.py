"""The chart's admins' limits (issue 37 item 3): `admission.allowed` reaches the policy
file, and `shoal serve` reads it as the limits both front doors apply; a bad list stops
the service with the key that is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.cli import settings
from scheduler.spec.allowed import Allowances

from .conftest import Render, by_kind


def _policy(render: Render, tmp_path: Path, *set_args: str) -> settings.Policy:
    cm = by_kind(render(*set_args), "ConfigMap")
    path = tmp_path / "policy.yaml"
    path.write_text(cm["data"]["policy.yaml"])
    return settings.load_policy(str(path), policy="fgd", min_runtime_s=60, interval_s=1)


def test_by_default_only_the_dangerous_defaults(render: Render, tmp_path: Path) -> None:
    assert _policy(render, tmp_path).allowed == Allowances()


def test_the_values_reach_the_service(render: Render, tmp_path: Path) -> None:
    pol = _policy(
        render,
        tmp_path,
        "admission.allowed.priorityClasses={team-low,system-node-critical}",
        "admission.allowed.tolerations[0].key=dedicated",
        "admission.allowed.tolerations[0].operator=Exists",
        "admission.allowed.nodeSelector.pool={gpu-*}",
    )
    assert pol.allowed == Allowances.model_validate(
        {
            "priorityClasses": ["team-low", "system-node-critical"],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "nodeSelector": {"pool": ["gpu-*"]},
        }
    )


def test_a_bad_list_stops_the_service_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text('allowed: {"tolerations": [{"operator": "Sometimes"}]}\n')
    with pytest.raises(settings.SettingsError, match=r"policy: allowed\.tolerations\.0"):
        settings.load_policy(str(path), policy="fgd", min_runtime_s=60, interval_s=1)
