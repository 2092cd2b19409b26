"""A job's nodeSelector, affinity and tolerations through the REST API and the loop on
the sim backend, whose nodes come from a cluster file with labels and taints (issue 24
item 1): a job lands only where its rules allow; one that no node allows stays Pending
with reason NodeRules in kube-scheduler's words, in GET /jobs/{id} and in explain
(which places on the inventory the loop recorded); bad rules are a 422 naming the
field, and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from conftest import ADMIN, NLP, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.cli.client import Api
from scheduler.cli.cluster import nodes_map
from scheduler.cli.output import Format
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig

J = "/api/v1/jobs"
CLUSTER = """
nodes:
  - {name: train, gpus: 8, gpuModel: H100-80GB, gpuMemory: 80Gi, cpu: 96, memory: 1000Gi,
     labels: {pool: training, tier: "2"}}
  - {name: serve, gpus: 8, gpuModel: H100-80GB, gpuMemory: 80Gi, cpu: 96, memory: 1000Gi,
     labels: {pool: serving, tier: "1"}}
  - {name: lab, gpus: 8, gpuModel: H100-80GB, gpuMemory: 80Gi, cpu: 96, memory: 1000Gi,
     labels: {pool: research}, taints: [{key: dedicated, value: research, effect: NoSchedule}]}
"""
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "research", "effect": "NoSchedule"}]


@pytest.fixture
def loop(app: FastAPI) -> Iterator[Loop]:
    clock = VirtualClock()
    backend = SimBackend(cluster.parse_nodes(yaml.safe_load(CLUSTER)), clock)
    loop = Loop(
        app.state.database, backend, clock=clock, config=LoopConfig(holder="t", lease_ttl_s=1e6)
    )
    loop.run_once()  # the store's nodes are now the cluster file's, for admission too
    yield loop


def _submit(client: TestClient, headers: dict[str, str] = VISION, **kw: Any) -> str:
    r = client.post(J, json=job_body(**kw), headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _nodes(client: TestClient, job_id: str) -> set[str]:
    job = client.get(f"{J}/{job_id}", headers=ADMIN).json()
    assert job["phase"] in ("Scheduled", "Running"), job["pendingReason"]
    return {p["node"] for p in job["placements"]}


def test_a_node_selector_lands_only_on_matching_nodes(client: TestClient, loop: Loop) -> None:
    ids = [_submit(client, name=f"s{i}", gpu=2, nodeSelector={"pool": "serving"}) for i in range(4)]
    loop.run_once()
    assert all(_nodes(client, i) == {"serve"} for i in ids)


def test_required_affinity_and_preference(client: TestClient, loop: Loop) -> None:
    """Required: `tier` Gt 0 (train, serve); preferred: serving. The preferred node is
    filled first, then the other allowed one; never the tainted lab."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["0"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "pool", "operator": "In", "values": ["serving"]}
                        ]
                    },
                }
            ],
        }
    }
    first = _submit(client, name="first", gpu=8, affinity=affinity)
    loop.run_once()
    second = _submit(client, name="second", gpu=8, affinity=affinity, tolerations=TOLERATE)
    loop.run_once()
    assert _nodes(client, first) == {"serve"} and _nodes(client, second) == {"train"}


def test_a_selector_no_node_matches_stays_pending_with_the_reason(
    client: TestClient, loop: Loop
) -> None:
    jid = _submit(client, name="nowhere", nodeSelector={"pool": "inference"})
    loop.run_once()
    loop.run_once()
    want = (
        "0/3 nodes are available: 2 node(s) didn't match the node selector, "
        "1 node(s) had untolerated taint {dedicated=research: NoSchedule}"
    )
    job = client.get(f"{J}/{jid}", headers=VISION).json()
    assert job["phase"] == "Pending" and job["placements"] == []
    assert job["pendingReason"]["code"] == "NodeRules", job["pendingReason"]
    assert want in job["pendingReason"]["message"], job["pendingReason"]
    # explain places on the inventory the loop stored: the labels and taints survived it
    explained = client.get(f"{J}/{jid}/explain", headers=ADMIN).json()
    assert explained["reason"]["code"] == "NodeRules", explained
    assert want in explained["reason"]["message"], explained
    # its candidates have room, but the rules refuse them: so they say
    assert {c["node"]: (c["fits"], c["reason"]) for c in explained["candidates"]} == {
        "train": (False, "node rules: didn't match the node selector"),
        "serve": (False, "node rules: didn't match the node selector"),
        "lab": (False, "node rules: had untolerated taint {dedicated=research: NoSchedule}"),
    }


def test_a_tainted_node_takes_only_jobs_that_tolerate_it(client: TestClient, loop: Loop) -> None:
    lab = {"pool": "research"}
    refused = _submit(client, name="refused", gpu=8, nodeSelector=lab)
    tolerated = _submit(client, name="tolerated", gpu=8, nodeSelector=lab, tolerations=TOLERATE)
    # no rules: train and serve (in nlp: vision's limit is 16)
    anywhere = _submit(client, NLP, name="anywhere", queue="nlp", gpu=8, workers=2)
    loop.run_once()
    assert _nodes(client, tolerated) == {"lab"}
    assert _nodes(client, anywhere) == {"train", "serve"}
    job = client.get(f"{J}/{refused}", headers=VISION).json()
    assert job["phase"] == "Pending" and job["pendingReason"]["code"] == "NodeRules"
    assert (
        "1 node(s) had untolerated taint {dedicated=research: NoSchedule}"
        in (job["pendingReason"]["message"])
    )


def test_exists_with_no_key_tolerates_every_taint(client: TestClient, loop: Loop) -> None:
    every = [{"operator": "Exists"}]
    # Refused by default (admins' limits, issue 37): the queue's admin allows it here.
    r = client.patch("/api/v1/queues/nlp", json={"allowed": {"tolerations": every}}, headers=ADMIN)
    assert r.status_code == 200, r.text
    jid = _submit(client, NLP, name="all", queue="nlp", gpu=8, workers=3, tolerations=every)
    loop.run_once()
    assert _nodes(client, jid) == {"train", "serve", "lab"}


def _term(**req: Any) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [req]}]
            }
        }
    }


TERM_LOC = [
    "body",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    0,
    "matchExpressions",
    0,
]
BAD: list[Any] = [
    pytest.param(
        {"nodeSelector": {"bad key!": "x"}},
        ["body", "nodeSelector"],
        "'bad key!' is not a label key",
        id="bad-label-key",
    ),
    pytest.param(
        {"nodeSelector": {"pool": "a b"}},
        ["body", "nodeSelector"],
        "'a b' is not a label value",
        id="bad-label-value",
    ),
    pytest.param(
        {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        ["body", "tolerations", 0],
        "value must be empty when operator is Exists",
        id="exists-with-value",
    ),
    pytest.param(
        {"tolerations": [{"key": "k", "effect": "NoSchedul"}]},
        ["body", "tolerations", 0, "effect"],
        "NoSchedule",
        id="unknown-effect",
    ),
    pytest.param(
        {"affinity": _term(key="pool", operator="In", values=[])},
        TERM_LOC,
        "values must not be empty with operator In",
        id="in-without-values",
    ),
    pytest.param(
        {"affinity": _term(key="tier", operator="Gt", values=["two"])},
        TERM_LOC,
        "operator Gt takes exactly one integer value",
        id="gt-not-an-integer",
    ),
    pytest.param(
        {"affinity": {"podAffinity": {}}},
        ["body", "affinity"],
        "podAffinity is not supported",
        id="pod-affinity",
    ),
    pytest.param(
        {"affinity": {"podAntiAffinity": {}}},
        ["body", "affinity"],
        "podAntiAffinity is not supported",
        id="pod-anti-affinity",
    ),
]


@pytest.mark.parametrize(("overrides", "loc", "words"), BAD)
def test_bad_node_rules_are_422_naming_the_field_and_change_nothing(
    client: TestClient, loop: Loop, overrides: dict[str, Any], loc: list[Any], words: str
) -> None:
    before = client.get(J, headers=ADMIN).json()
    r = client.post(J, json=job_body(**overrides), headers=VISION)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"] == loc and words in d["msg"] for d in detail), detail
    assert client.get(J, headers=ADMIN).json() == before


def test_nodes_show_their_labels_and_taints(client: TestClient, loop: Loop) -> None:
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes", headers=VISION).json()["data"]}
    assert nodes["lab"]["labels"] == {"kubernetes.io/hostname": "lab", "pool": "research"}
    assert nodes["lab"]["taints"] == [
        {"key": "dedicated", "value": "research", "effect": "NoSchedule"}
    ]
    assert nodes["train"]["taints"] == [] and nodes["train"]["labels"]["tier"] == "2"


def test_shoal_nodes_prints_labels_and_taints(
    app: FastAPI, loop: Loop, capsys: pytest.CaptureFixture[str]
) -> None:
    api = Api("http://testserver", "admin-token")
    api.http = TestClient(app, base_url="http://testserver", headers=ADMIN)
    nodes_map(api, Format.TABLE)
    shown = capsys.readouterr().out
    assert "labels pool=research  taints dedicated=research:NoSchedule" in shown, shown
    assert "labels pool=training,tier=2\n" in shown and "hostname" not in shown, shown
