"""Admins' limits through the REST API and the CLI (issue 37 item 3): a job asking a
PriorityClass, toleration or node label its queue (or the chart) does not allow is a 422
naming the field and the rule and is not stored; a queue's `allowed` is set and shown
through the API; the chart's list binds (the API role's app reads it from the policy
file); `shoal submit` prints the API's reason and exits 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN, TOKENS, VISION, Shoal, job_body
from fastapi.testclient import TestClient

from api.services import Wiring, services_of
from scheduler.cli import apirole
from scheduler.spec.allowed import Allowances
from scheduler.spec.queue import QueueSpec
from scheduler.store.queues import create_queue

JOBS = "/api/v1/jobs"


@pytest.fixture
def wiring(request: pytest.FixtureRequest) -> Wiring:
    """Parametrized with an `Allowances` dict: the chart's admission.allowed."""
    chart = getattr(request, "param", None)
    return Wiring(chart_limits=None if chart is None else Allowances.model_validate(chart))


def refused(client: TestClient, body: dict[str, Any], headers: dict[str, str] = VISION) -> Any:
    r = client.post(JOBS, json=body, headers=headers)
    assert r.status_code == 422, r.text
    stored = client.get(JOBS, headers=ADMIN).json()["data"]
    assert stored == [], "a refused job was stored"
    return r.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        pytest.param(
            {"priorityClassName": "system-node-critical"},
            ["body", "priorityClassName"],
            "PriorityClass 'system-node-critical' is refused by default",
            id="system-class",
        ),
        pytest.param(
            {"tolerations": [{"operator": "Exists"}]},
            ["body", "tolerations", 0],
            "a toleration of every taint (operator Exists with no key) is refused by default",
            id="tolerate-everything",
        ),
        pytest.param(
            {"tolerations": [{"key": "node-role.kubernetes.io/control-plane"}]},
            ["body", "tolerations", 0],
            "control-plane taint",
            id="control-plane",
        ),
    ],
)
def test_dangerous_asks_are_refused_with_no_configuration(
    client: TestClient, fields: dict[str, Any], loc: list[Any], words: str
) -> None:
    if "tolerations" in fields and "operator" not in fields["tolerations"][0]:
        fields = {"tolerations": [{**fields["tolerations"][0], "operator": "Exists"}]}
    detail = refused(client, job_body(**fields))
    assert [d["loc"] for d in detail] == [loc]
    assert words in detail[0]["msg"]
    assert "queue 'vision'" in detail[0]["msg"]  # where an admin allows it
    assert detail[0]["type"] == "admission"


def test_a_queue_allows_what_it_lists_and_refuses_the_rest(client: TestClient) -> None:
    allowed = {
        "priorityClasses": ["team-*", "system-node-critical"],
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
        ],
        "nodeSelector": {"pool": ["vision-*"]},
    }
    r = client.patch("/api/v1/queues/vision", json={"allowed": allowed}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["allowed"] == allowed
    assert client.get("/api/v1/queues/vision", headers=VISION).json()["allowed"] == allowed

    detail = refused(client, job_body(priorityClassName="batch-high"))
    assert detail[0]["loc"] == ["body", "priorityClassName"]
    assert "queue 'vision' allows only these" in detail[0]["msg"]
    assert "PATCH /api/v1/queues/vision" in detail[0]["msg"]
    detail = refused(client, job_body(tolerations=[{"key": "dedicated", "value": "infra"}]))
    assert detail[0]["loc"] == ["body", "tolerations", 0]
    detail = refused(client, job_body(nodeSelector={"pool": "infra"}))
    assert detail[0]["loc"] == ["body", "nodeSelector", "pool"]

    ok = job_body(
        priorityClassName="system-node-critical",  # named exactly by the admin
        tolerations=[{"key": "dedicated", "value": "vision", "effect": "NoSchedule"}],
        nodeSelector={"pool": "vision-a"},
    )
    r = client.post(JOBS, json=ok, headers=VISION)
    assert r.status_code == 201, r.text
    # The other queue has no list: its jobs keep the defaults.
    nlp = job_body(queue="nlp", name="n", priorityClassName="system-node-critical")
    r = client.post(JOBS, json=nlp, headers=ADMIN)
    assert r.status_code == 422 and "refused by default" in r.text


def test_a_bad_allow_list_is_a_422_naming_it(client: TestClient) -> None:
    r = client.patch(
        "/api/v1/queues/vision",
        json={"allowed": {"tolerations": [{"operator": "Sometimes"}]}},
        headers=ADMIN,
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:3] == ["body", "allowed", "tolerations"]
    assert client.get("/api/v1/queues/vision", headers=ADMIN).json()["allowed"] is None


@pytest.mark.parametrize("wiring", [{"priorityClasses": ["team-*"]}], indirect=True)
def test_the_charts_list_binds_queues_without_their_own(client: TestClient) -> None:
    detail = refused(client, job_body(priorityClassName="batch"))
    assert "the chart allows only these (admission.allowed.priorityClasses)" in detail[0]["msg"]
    r = client.post(JOBS, json=job_body(priorityClassName="team-a"), headers=VISION)
    assert r.status_code == 201, r.text
    # A queue's own list replaces the chart's for that kind.
    r = client.patch(
        "/api/v1/queues/nlp", json={"allowed": {"priorityClasses": ["batch"]}}, headers=ADMIN
    )
    assert r.status_code == 200, r.text
    r = client.post(JOBS, json=job_body(queue="nlp", priorityClassName="batch"), headers=ADMIN)
    assert r.status_code == 201, r.text


def test_shoal_submit_prints_the_reason_and_fails(
    client: TestClient, shoal: Shoal, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: crit\nqueue: vision\nimage: img:1\ngpu: 1\npriorityClassName: system-node-critical\n"
    )
    result = shoal("submit", "-f", str(spec))
    assert result.exit_code == 1, result.output
    assert "priorityClassName" in result.output and "refused by default" in result.output
    every = shoal("submit", "--queue", "vision", "--image", "img:1", "--toleration", ":NoSchedule")
    assert every.exit_code == 1, every.output
    assert "tolerations" in every.output and "every taint" in every.output
    assert client.get(JOBS, headers=ADMIN).json()["data"] == []


def test_the_api_roles_app_reads_the_charts_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shoal serve --role api` (uvicorn's workers): the policy file's `allowed` binds."""
    env = apirole.role_environment(
        database_url=f"sqlite:///{tmp_path / 'shoal.db'}",
        tokens=tmp_path / "tokens.yaml",
        worker_key=None,
        policy="fgd",
        min_runtime_s=5,
        interval_s=2,
    )
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    policy = tmp_path / "policy.yaml"
    policy.write_text('policy: fgd\nallowed: {"priorityClasses": ["team-*"]}\n')
    for name, value in {**env, "SHOAL_POLICY_FILE": str(policy)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SHOAL_API_TOKENS", raising=False)
    app = apirole.app_from_env()
    try:
        with services_of(app).database.session() as s:
            create_queue(session=s, spec=QueueSpec(name="vision", guaranteed=8))
        with TestClient(app) as client:
            r = client.post(JOBS, json=job_body(priorityClassName="batch"), headers=ADMIN)
            assert r.status_code == 422, r.text
            assert "the chart allows only these" in r.json()["detail"][0]["msg"]
            r = client.post(JOBS, json=job_body(priorityClassName="team-a"), headers=ADMIN)
            assert r.status_code == 201, r.text
    finally:
        services_of(app).database.close()
