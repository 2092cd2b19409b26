"""Issue 15, fault 7: progress events are bounded, compacted and paginated. A `final`
report skips the throttle once per attempt, not every time; a report's size is bounded
(422 naming the field); only a job's newest Progress events are kept; the events endpoint
answers a page at a time."""

from __future__ import annotations

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi.testclient import TestClient

from api.routes import logs
from api.routes.logs import PROGRESS_KEEP

J = "/api/v1/jobs"


def _job(client: TestClient) -> str:
    r = client.post(J, json=job_body(), headers=VISION)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _progress(client: TestClient, job: str, **body: object) -> int:
    report = {"attempt": 1, "worker": 0, "progress": {"step": 1, "loss": 0.5}, **body}
    return client.post(f"{J}/{job}/progress", json=report, headers=ADMIN).status_code


def _all_events(client: TestClient, job: str) -> list[dict[str, object]]:
    r = client.get(f"{J}/{job}/events", headers=VISION)
    assert r.status_code == 200
    return list(r.json()["data"])


def test_repeated_final_reports_are_throttled_after_the_first(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A throttle window longer than the test, however slow the machine.
    monkeypatch.setattr(logs, "PROGRESS_EVERY_S", 3600.0)
    job = _job(client)
    for i in range(100):
        assert _progress(client, job, final=True, progress={"step": i}) == 204
    progress = [e for e in _all_events(client, job) if e["kind"] == "Progress"]
    # The first final report of the attempt is kept at once; the 99 repeats are throttled.
    assert len(progress) == 1, len(progress)
    assert _progress(client, job, final=True, attempt=2) == 204  # a new attempt's final
    assert len([e for e in _all_events(client, job) if e["kind"] == "Progress"]) == 2


def test_only_the_newest_progress_events_are_kept(client: TestClient) -> None:
    job = _job(client)
    for i in range(PROGRESS_KEEP + 10):
        assert _progress(client, job, final=True, attempt=i + 1, progress={"step": i}) == 204
    events = _all_events(client, job)
    progress = [e for e in events if e["kind"] == "Progress"]
    assert len(progress) == PROGRESS_KEEP
    assert [e["data"]["step"] for e in progress] == list(range(10, PROGRESS_KEEP + 10))  # type: ignore[index]
    assert any(e["kind"] != "Progress" for e in events)  # the rest of the history stays


def test_a_progress_report_is_bounded(client: TestClient) -> None:
    job = _job(client)
    cases = {
        "many keys": {f"k{i}": i for i in range(33)},
        "nested": {"metrics": {"a": 1}},
        "long key": {"k" * 65: 1},
        "big": {f"k{i}": "x" * 200 for i in range(30)},
    }
    for name, progress in cases.items():
        r = client.post(
            f"{J}/{job}/progress",
            json={"attempt": 1, "worker": 0, "progress": progress},
            headers=ADMIN,
        )
        assert r.status_code == 422, (name, r.text)
        assert r.json()["detail"][0]["loc"][:2] == ["body", "progress"], (name, r.text)
    assert _progress(client, job, worker=4096) == 422
    assert not [e for e in _all_events(client, job) if e["kind"] == "Progress"]


def test_events_come_a_page_at_a_time_in_either_order(client: TestClient) -> None:
    job = _job(client)
    for i in range(12):
        assert _progress(client, job, final=True, attempt=i + 1, progress={"step": i}) == 204
    everything = _all_events(client, job)
    seen: list[dict[str, object]] = []
    url = f"{J}/{job}/events?limit=5"
    while True:
        page = client.get(url, headers=VISION).json()
        assert len(page["data"]) <= 5
        seen += page["data"]
        if page["nextCursor"] is None:
            break
        url = f"{J}/{job}/events?limit=5&cursor={page['nextCursor']}"
    assert seen == everything
    newest = client.get(f"{J}/{job}/events?limit=3&order=desc", headers=VISION).json()
    assert newest["data"] == everything[::-1][:3]
    after = client.get(
        f"{J}/{job}/events?limit=3&order=desc&cursor={newest['nextCursor']}", headers=VISION
    ).json()
    assert after["data"] == everything[::-1][3:6]
    for bad in ("limit=0", "limit=501", "order=sideways", "cursor=zzz"):
        r = client.get(f"{J}/{job}/events?{bad}", headers=VISION)
        assert r.status_code == 422, (bad, r.text)
