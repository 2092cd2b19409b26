"""What runs during `helm upgrade`: never two schedulers at once without leader election
(issue 24 item 7). SQLite: Recreate (one writer on the volume, no election); PostgreSQL:
election at any replica count, so the rolling update's surge pod follows until the old
pod releases the Lease, and the API stays up through the upgrade."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Render, by_kind

POSTGRES = "database.postgres.url=postgresql+psycopg://shoal:pw@db.example:5432/shoal"

CONFIGS = {
    "sqlite": (),
    "postgres-1": ("database.type=postgres", POSTGRES, "scheduler.replicas=1"),
    "postgres-2": ("database.type=postgres", POSTGRES),
    "postgres-existing-secret": ("database.type=postgres", "database.postgres.existingSecret=db"),
}


def _deployment(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = by_kind(docs, "Deployment", "shoal")  # the scheduler's (or both's, SQLite)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    return deployment, env


@pytest.mark.parametrize("values", CONFIGS.values(), ids=CONFIGS.keys())
def test_an_upgrade_never_runs_two_unelected_schedulers(
    render: Render, values: tuple[str, ...]
) -> None:
    deployment, env = _deployment(render(*values))
    recreate = deployment["spec"].get("strategy", {}).get("type") == "Recreate"
    # A RollingUpdate (the default strategy) surges a second pod beside the old one.
    assert recreate or env["SHOAL_LEADER_ELECTION"] == "true", (
        f"strategy {deployment['spec'].get('strategy')} with election "
        f"{env['SHOAL_LEADER_ELECTION']}"
    )


def test_one_postgres_replica_is_elected_and_rolls(render: Render) -> None:
    one = ("database.type=postgres", POSTGRES, "scheduler.replicas=1", "api.replicas=1")
    deployment, env = _deployment(render(*one))
    assert deployment["spec"]["replicas"] == 1
    assert env["SHOAL_LEADER_ELECTION"] == "true"
    assert env["SHOAL_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "strategy" not in deployment["spec"]  # RollingUpdate: the API stays up
    # One replica: no disruption budget (it would block every drain) and no spread.
    docs = render(*one)
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert "affinity" not in deployment["spec"]["template"]["spec"]


def test_sqlite_recreates_without_election(render: Render) -> None:
    deployment, env = _deployment(render())
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert env["SHOAL_LEADER_ELECTION"] == "false"
