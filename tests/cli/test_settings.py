"""`shoal serve`'s settings: the Helm chart's environment and policy file, read as the
chart renders them, and refused with the variable's name when they are wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler import model
from scheduler.cli import settings
from scheduler.cli.main import app


def test_defaults_without_environment() -> None:
    s = settings.from_env({})
    assert s.tokens_file is None and s.policy_file is None and not s.leader_election
    assert s.jobs_namespace == "shoal-jobs" and s.lease_name == "shoal-scheduler"
    assert s.worker_security_context is None and s.worker_tolerations == ()


def test_the_charts_environment(tmp_path: Path) -> None:
    (tmp_path / "sc.json").write_text(json.dumps({"runAsNonRoot": True}))
    (tmp_path / "tol.json").write_text("[]")
    s = settings.from_env(
        {
            "SHOAL_API_TOKENS_FILE": "/etc/shoal/tokens/tokens.yaml",
            "SHOAL_WORKER_SECURITY_CONTEXT_FILE": str(tmp_path / "sc.json"),
            "SHOAL_WORKER_TOLERATIONS_FILE": str(tmp_path / "tol.json"),
            "SHOAL_JOBS_NAMESPACE": "gpu-jobs",
            "SHOAL_LEADER_ELECTION": "true",
            "SHOAL_LEADER_ELECTION_NAMESPACE": "shoal-system",
            "SHOAL_POD_NAME": "shoal-7f9-abc",
        }
    )
    assert s.tokens_file == "/etc/shoal/tokens/tokens.yaml"
    assert s.worker_security_context == {"runAsNonRoot": True}
    assert s.jobs_namespace == "gpu-jobs" and s.leader_election
    assert s.pod_name == "shoal-7f9-abc"


def test_the_charts_policy_file(tmp_path: Path) -> None:
    # The exact text helm/shoal/templates/configmap.yaml renders with the defaults.
    f = tmp_path / "policy.yaml"
    f.write_text(
        "policy: fgd\nminRuntimeSeconds: 60\nstarvationSeconds: 600\n"
        "preemption: true\nintervalSeconds: 1\n"
    )
    p = settings.load_policy(str(f), policy="binpack", min_runtime_s=5, interval_s=3)
    assert p.core == model.Config(
        policy=model.Policy.FGD, min_runtime_s=60, starvation_s=600, preemption=True
    )
    assert p.interval_s == 1
    flags = settings.load_policy(None, policy="spread", min_runtime_s=5, interval_s=3)
    assert flags.core.policy is model.Policy.SPREAD and flags.core.min_runtime_s == 5


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("policy: fastest\n", "fastest"),
        ("minRuntime: 5\n", "unknown key(s) minRuntime"),
        ("preemption: maybe\n", "preemption"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_bad_policy_files_are_refused(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text(text)
    with pytest.raises(settings.SettingsError, match=says.replace("(", r"\(").replace(")", r"\)")):
        settings.load_policy(str(f), policy="fgd", min_runtime_s=60, interval_s=1)


def test_bad_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(settings.SettingsError, match="SHOAL_LEADER_ELECTION"):
        settings.from_env({"SHOAL_LEADER_ELECTION": "sometimes"})
    (tmp_path / "tol.json").write_text('{"key": "gpu"}')
    with pytest.raises(settings.SettingsError, match="SHOAL_WORKER_TOLERATIONS_FILE"):
        settings.from_env({"SHOAL_WORKER_TOLERATIONS_FILE": str(tmp_path / "tol.json")})


def test_reserve_is_a_command() -> None:
    result = CliRunner().invoke(app, ["reserve", "--help"])
    assert result.exit_code == 0 and "GPU" in result.output
