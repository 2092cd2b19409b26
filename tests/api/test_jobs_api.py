"""Jobs, nodes, summary and metrics through HTTP (TestClient)."""

from __future__ import annotations

from conftest import ADMIN, NLP, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.model import PendingReason, ReasonCode, WorkerPlacement
from scheduler.store.transitions import record_placement, set_pending_reason

API = "/api/v1"


def _submit(client: TestClient, headers: dict[str, str] = VISION, **kw: object) -> str:
    r = client.post(f"{API}/jobs", json=job_body(**kw), headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_submit_get_and_events(client: TestClient) -> None:
    jid = _submit(client, workers=2, gpu=0.5, command=["python", "train.py"])
    body = client.get(f"{API}/jobs/{jid}", headers=VISION).json()
    assert body["phase"] == "Pending" and body["submitter"] == "alice"
    assert body["spec"]["gpu"] == 0.5 and body["spec"]["command"] == ["python", "train.py"]
    assert body["placements"] == [] and body["pendingReason"] is None
    events = client.get(f"{API}/jobs/{jid}/events", headers=VISION).json()["data"]
    assert [e["kind"] for e in events] == ["Submitted"]


def test_idempotency_key(client: TestClient) -> None:
    h = {**VISION, "Idempotency-Key": "abc-1"}
    first = client.post(f"{API}/jobs", json=job_body(), headers=h)
    again = client.post(f"{API}/jobs", json=job_body(), headers=h)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = client.post(f"{API}/jobs", json=job_body(workers=2), headers=h)
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert len(client.get(f"{API}/jobs", headers=ADMIN).json()["data"]) == 1


def test_list_newest_first_with_cursor_and_filters(client: TestClient) -> None:
    ids = [_submit(client, name=f"j{i}") for i in range(5)]
    _submit(client, headers=NLP, queue="nlp", name="other")
    seen, cursor = [], None
    while True:
        params: dict[str, str | int] = {"limit": 2, "queue": "vision"}
        if cursor:
            params["cursor"] = cursor
        page = client.get(f"{API}/jobs", params=params, headers=ADMIN).json()
        seen += [j["id"] for j in page["data"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    assert (
        len(client.get(f"{API}/jobs", params={"phase": "Pending"}, headers=ADMIN).json()["data"])
        == 6
    )
    assert (
        client.get(f"{API}/jobs", params={"submitter": "bob"}, headers=ADMIN).json()["data"][0][
            "name"
        ]
        == "other"
    )
    bad = client.get(f"{API}/jobs", params={"cursor": "zzz"}, headers=ADMIN)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_cancel(client: TestClient) -> None:
    jid = _submit(client)
    r = client.post(f"{API}/jobs/{jid}/cancel", headers=VISION)
    assert r.status_code == 200 and r.json()["phase"] == "Cancelled"
    assert client.post(f"{API}/jobs/{jid}/cancel", headers=VISION).status_code == 200


def test_placement_and_pending_reason_show_on_get_nodes_summary_metrics(
    app: FastAPI, client: TestClient
) -> None:
    placed = _submit(client, workers=2, gpu=0.5)
    waiting = _submit(client, name="big", gpu=8)
    with app.state.database.session() as s:
        record_placement(
            session=s,
            job_id=placed,
            expected_version=1,
            placements=[WorkerPlacement(0, "h1", (3,), 0.5), WorkerPlacement(1, "h1", (3,), 0.5)],
            attempt=1,
        )
        set_pending_reason(
            session=s,
            job_id=waiting,
            reason=PendingReason(ReasonCode.NO_NODE, "needs 8 GPUs on one node; largest is 7"),
        )
    got = client.get(f"{API}/jobs/{placed}", headers=VISION).json()
    assert got["phase"] == "Scheduled" and got["placements"][1] == {
        "worker": 1,
        "node": "h1",
        "gpus": [3],
        "fraction": 0.5,
        "enforcement": "advisory",  # fractions are cooperative, and the API says so
    }
    reason = client.get(f"{API}/jobs/{waiting}", headers=VISION).json()["pendingReason"]
    assert reason["code"] == "NoFittingNode" and "largest is 7" in reason["message"]

    nodes = {n["name"]: n for n in client.get(f"{API}/nodes", headers=VISION).json()["data"]}
    gpu3 = nodes["h1"]["gpus"][3]
    assert gpu3["model"] == "H100-80GB" and gpu3["memoryMib"] == 81920
    assert gpu3["allocated"] == 1.0 and [s["jobId"] for s in gpu3["shares"]] == [placed, placed]
    nlp_nodes = {n["name"]: n for n in client.get(f"{API}/nodes", headers=NLP).json()["data"]}
    hidden = nlp_nodes["h1"]["gpus"][3]["shares"]
    assert {s["jobId"] for s in hidden} == {None}  # another team's job stays anonymous

    summary = client.get(f"{API}/cluster/summary", headers=ADMIN).json()
    assert summary["gpus"] == {"total": 20.0, "allocated": 1.0, "idle": 19.0, "draining": 0.0}
    assert summary["byModel"]["H100-80GB"]["allocated"] == 1.0
    vision = next(q for q in summary["queues"] if q["name"] == "vision")
    assert vision == {
        "name": "vision",
        "allocated": 1.0,
        "guaranteed": 8.0,
        "limit": 16.0,
        "pending": 1,
        "running": 1,
    }
    assert summary["pending"] == 1
    nlp_view = client.get(f"{API}/cluster/summary", headers=NLP).json()
    assert [q["name"] for q in nlp_view["queues"]] == ["nlp"]

    text = client.get("/metrics", headers=ADMIN).text
    assert 'shoal_queue_gpus_allocated{queue="vision"} 1.0' in text
    assert 'shoal_gpus_idle{model="H100-80GB"} 15.0' in text
    assert 'shoal_jobs{phase="Scheduled"} 1.0' in text
    assert "shoal_api_request_seconds_bucket" in text


def test_health_without_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}
    assert client.get("/metrics").status_code == 401


def test_readyz_reports_an_unreachable_database(client: TestClient, app: FastAPI) -> None:
    app.state.database.engine.dispose()
    from scheduler.store.db import make_engine

    app.state.database.engine = make_engine("sqlite:////nonexistent-dir/x.db")
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["status"] == "database unreachable"


def test_queue_delete_with_live_jobs_is_409_with_reason(client: TestClient) -> None:
    jid = _submit(client)
    r = client.delete(f"{API}/queues/vision", headers=ADMIN)
    assert r.status_code == 409 and "1 live job" in r.json()["detail"][0]["msg"]
    client.post(f"{API}/jobs/{jid}/cancel", headers=ADMIN)
    assert client.delete(f"{API}/queues/vision", headers=ADMIN).status_code == 204


def test_queue_crud(client: TestClient) -> None:
    r = client.post(
        f"{API}/queues",
        json={
            "name": "cv-research",
            "parent": "vision",
            "guaranteed": {"total": 4, "H100-80GB": 2},
        },
        headers=ADMIN,
    )
    assert r.status_code == 201, r.text
    assert r.json()["guaranteed"] == {"total": 4.0, "H100-80GB": 2.0}
    too_big = client.post(
        f"{API}/queues", json={"name": "x", "parent": "vision", "guaranteed": 5}, headers=ADMIN
    )
    assert too_big.status_code == 422
    assert too_big.json()["detail"][0]["loc"] == ["body", "guaranteed", "total"]
    r = client.patch(f"{API}/queues/cv-research", json={"weight": 3, "version": 1}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["weight"] == 3 and r.json()["version"] == 2
    stale = client.patch(
        f"{API}/queues/cv-research", json={"weight": 4, "version": 1}, headers=ADMIN
    )
    assert stale.status_code == 409
    assert client.post(f"{API}/queues", json={"name": "nlp"}, headers=ADMIN).status_code == 409
    assert client.delete(f"{API}/queues/vision", headers=ADMIN).status_code == 409  # child
    assert client.delete(f"{API}/queues/cv-research", headers=ADMIN).status_code == 204
    assert client.get(f"{API}/queues/cv-research", headers=ADMIN).status_code == 404


def test_the_main_flow_on_postgres(pg_app: FastAPI) -> None:
    with TestClient(pg_app) as client:
        jid = _submit(client, workers=2, gpu=0.5)
        h = {**VISION, "Idempotency-Key": "k"}
        second = job_body(name="train-2")  # names are unique among a queue's live jobs
        assert client.post(f"{API}/jobs", json=second, headers=h).status_code == 201
        assert client.post(f"{API}/jobs", json=second, headers=h).status_code == 200
        assert client.get(f"{API}/jobs/{jid}", headers=VISION).json()["phase"] == "Pending"
        assert len(client.get(f"{API}/jobs", headers=VISION).json()["data"]) == 2
        assert (
            client.post(f"{API}/jobs/{jid}/cancel", headers=VISION).json()["phase"] == "Cancelled"
        )
        assert client.get(f"{API}/cluster/summary", headers=ADMIN).json()["gpus"]["total"] == 20.0
        assert client.get("/readyz").status_code == 200


def test_explain_reports_the_cores_account(client: TestClient) -> None:
    jid = _submit(client, workers=2, gpu=8)
    body = client.get(f"{API}/jobs/{jid}/explain", headers=VISION).json()
    assert body["jobId"] == jid and body["decision"] == "placed"
    assert {p["node"] for p in body["placements"]} == {"h1", "h2"}
    assert body["fairShare"][0]["queue"] == "vision"
    assert "queuePosition" in body and "job_id" not in body
    assert client.get(f"{API}/jobs/{jid}/explain", headers=NLP).status_code == 404


def test_explain_shows_a_member_no_parent_line_summing_other_teams(client: TestClient) -> None:
    org = {"name": "org", "guaranteed": {"total": 12}}
    assert client.post(f"{API}/queues", json=org, headers=ADMIN).status_code == 201
    for child in ("vision", "nlp"):
        moved = client.patch(f"{API}/queues/{child}", json={"parent": "org"}, headers=ADMIN)
        assert moved.status_code == 200, moved.text
    _submit(client, headers=NLP, queue="nlp", name="theirs", gpu=4)
    jid = _submit(client, gpu=8)
    mine = client.get(f"{API}/jobs/{jid}/explain", headers=VISION).json()
    assert {line["queue"] for line in mine["fairShare"]} == {"vision"}
    full = client.get(f"{API}/jobs/{jid}/explain", headers=ADMIN).json()
    assert {line["queue"] for line in full["fairShare"]} == {"vision", "org"}
