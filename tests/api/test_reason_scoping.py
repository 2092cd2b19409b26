"""Issue 15, fault 8: reasons and explain never name another team's job to a reader who
cannot see it (a job that is 404 for them), and explain says "awaiting preemption of X"
rather than "placed" while the job waits for its victims to stop."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from conftest import ADMIN, NLP, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler import model
from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store.rows import get_job
from scheduler.store.transitions import record_placement, set_pending_reason, set_phase

API = "/api/v1"


def _submit(client: TestClient, headers: dict[str, str], **kw: object) -> str:
    r = client.post(f"{API}/jobs", json=job_body(**kw), headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _run(app: FastAPI, job_id: str, node: str, gpus: tuple[int, ...]) -> None:
    """Place and start a job in the store as the loop would (an hour ago)."""
    at = datetime.now(UTC) - timedelta(hours=1)
    with app.state.database.session() as s:
        row = get_job(session=s, job_id=job_id)
        placements = [WorkerPlacement(0, node, gpus, 1.0)]
        v = record_placement(
            session=s,
            job_id=job_id,
            expected_version=row.version,
            placements=placements,
            attempt=1,
            now=at,
        )
        set_phase(session=s, job_id=job_id, expected_version=v, phase=Phase.RUNNING, now=at)


def _waiting_for(app: FastAPI, job_id: str, victim: str, label: str) -> None:
    """The reason the loop stores while the victims of a preemption still stop."""
    reason = model.PendingReason(
        model.ReasonCode.WAITING_FOR_PREEMPTION,
        f"preempting {label} (8 GPUs); the job is placed once they have stopped",
        {"victims": [victim], "victim_gpus": 8, "stopping": []},
    )
    with app.state.database.session() as s:
        set_pending_reason(session=s, job_id=job_id, reason=reason)


def test_a_pending_reason_hides_another_teams_job(app: FastAPI, client: TestClient) -> None:
    theirs = _submit(client, NLP, queue="nlp", name="secret-nlp", gpu=8)
    mine = _submit(client, VISION, name="mine", gpu=8)
    _waiting_for(app, mine, theirs, f"secret-nlp ({theirs})")
    for url in (f"{API}/jobs/{mine}", f"{API}/jobs?queue=vision"):
        seen = client.get(url, headers=VISION).text
        assert theirs not in seen and "secret-nlp" not in seen, seen
        assert "a job in another queue" in seen
        full = client.get(url, headers=ADMIN).text
        assert theirs in full and "secret-nlp" in full
    body = client.get(f"{API}/jobs/{mine}", headers=VISION).json()
    assert body["pendingReason"]["details"]["victims"] == ["hidden"]
    assert client.get(f"{API}/jobs/{theirs}", headers=VISION).status_code == 404


def test_explain_says_awaiting_preemption_not_placed(app: FastAPI, client: TestClient) -> None:
    # The victim is Pending again in the store (its workers still stop, which only the
    # loop sees), so on the store alone the job would fit at once.
    theirs = _submit(client, NLP, queue="nlp", name="secret-nlp", gpu=8)
    mine = _submit(client, VISION, name="mine", gpu=8)
    _waiting_for(app, mine, theirs, f"secret-nlp ({theirs})")
    full = client.get(f"{API}/jobs/{mine}/explain", headers=ADMIN).json()
    assert full["decision"] == "preempting", full
    assert full["placements"] == []
    assert full["reason"]["message"].startswith(f"awaiting preemption of secret-nlp ({theirs})")
    seen = client.get(f"{API}/jobs/{mine}/explain", headers=VISION).json()
    assert seen["decision"] == "preempting"
    assert seen["reason"]["message"].startswith("awaiting preemption of a job in another queue")
    assert theirs not in json.dumps(seen) and "secret-nlp" not in json.dumps(seen)


def test_explain_of_a_reclaim_hides_the_victims(app: FastAPI, client: TestClient) -> None:
    # nlp (guarantee 4) borrows all 16 H100s; vision (guarantee 8) reclaims 8 of them.
    victims = []
    for i, node in enumerate(("h1", "h2")):
        jid = _submit(client, NLP, queue="nlp", name=f"nlp-{i}", gpu=8, gpuType=["H100-80GB"])
        _run(app, jid, node, tuple(range(8)))
        victims.append(jid)
    mine = _submit(client, VISION, name="mine", gpu=8, gpuType=["H100-80GB"])
    full = client.get(f"{API}/jobs/{mine}/explain", headers=ADMIN).json()
    assert full["decision"] in ("preempting", "pending"), full
    named = json.dumps(full)
    assert any(v in named for v in victims), full  # the admin is told which job goes
    seen = json.dumps(client.get(f"{API}/jobs/{mine}/explain", headers=VISION).json())
    for i, v in enumerate(victims):
        assert v not in seen and f"nlp-{i}" not in seen, seen


def test_a_victim_is_not_told_which_other_teams_job_preempted_it(
    app: FastAPI, client: TestClient
) -> None:
    victim = _submit(client, NLP, queue="nlp", name="theirs", gpu=8)
    _run(app, victim, "h1", tuple(range(8)))
    mine = _submit(client, VISION, name="vision-secret", gpu=8)
    # What the loop writes for a reclaim (scheduler/loop/apply.py: reason, then "(for X)").
    message = (
        f"reclaimed for job vision-secret ({mine}): queue vision is below its guarantee "
        f"(for {mine})"
    )
    with app.state.database.session() as s:
        row = get_job(session=s, job_id=victim)
        set_phase(
            session=s,
            job_id=victim,
            expected_version=row.version,
            phase=Phase.PREEMPTED,
            reason="Preempted",
            message=message,
        )
    for url in (f"{API}/jobs/{victim}", f"{API}/jobs/{victim}/events"):
        seen = client.get(url, headers=NLP).text
        assert mine not in seen and "vision-secret" not in seen, seen
        assert "reclaimed for a job in another queue" in seen, seen
        assert mine in client.get(url, headers=ADMIN).text


def test_reason_details_are_camel_case_as_the_api_says(app: FastAPI, client: TestClient) -> None:
    """Issue 25 item 8: the core's detail keys are served in the API's camelCase, in a
    job's pending reason and in explain (nested maps keep their keys: they are names)."""
    mine = _submit(client, VISION, name="mine", gpu=8)
    _waiting_for(app, mine, "x", "x")
    body = client.get(f"{API}/jobs/{mine}", headers=ADMIN).json()
    assert body["pendingReason"]["details"] == {"victims": ["x"], "victimGpus": 8, "stopping": []}
    explained = client.get(f"{API}/jobs/{mine}/explain", headers=ADMIN).json()
    keys = set((explained["reason"] or {}).get("details") or {})
    assert keys and not any("_" in k for k in keys), keys


def test_a_resize_hides_the_job_it_made_room_for(app: FastAPI, client: TestClient) -> None:
    """issue 35: `resizes[].message` named the other team's job that `/events` hid."""
    from scheduler.store import resizes

    theirs = _submit(client, NLP, queue="nlp", name="secret-nlp", gpu=1)
    mine = _submit(
        client,
        VISION,
        name="elastic",
        framework="pytorch",
        workers={"min": 1, "max": 2},
        command=["torchrun", "train.py"],
    )
    at = datetime.now(UTC) - timedelta(hours=1)
    with app.state.database.session() as s:
        row = get_job(session=s, job_id=mine)
        two = [WorkerPlacement(0, "n1", (0,), 1.0), WorkerPlacement(1, "n1", (1,), 1.0)]
        v = record_placement(
            session=s, job_id=mine, expected_version=row.version, placements=two,
            attempt=1, now=at,
        )  # fmt: skip
        v = set_phase(session=s, job_id=mine, expected_version=v, phase=Phase.RUNNING)
        resizes.record_resize(
            session=s,
            job_id=mine,
            expected_version=v,
            placements=two[:1],
            reason=f"reclaimed for job secret-nlp ({theirs}): queue nlp is below its "
            f"guarantee (for {theirs})",
        )
    body = client.get(f"{API}/jobs/{mine}", headers=VISION).json()
    assert len(body["resizes"]) == 1, body
    said = body["resizes"][0]["message"]
    assert theirs not in said and "secret-nlp" not in said, said
    assert said.startswith("2 -> 1 workers: reclaimed for a job in another queue"), said
    events = client.get(f"{API}/jobs/{mine}/events", headers=VISION).text
    assert theirs not in events and "secret-nlp" not in events
    full = client.get(f"{API}/jobs/{mine}", headers=ADMIN).json()["resizes"][0]["message"]
    assert f"secret-nlp ({theirs})" in full
