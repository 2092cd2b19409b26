"""The CLI against the real API app (issue 25): worker output is written as it is, the
latest progress is the latest, and the everyday verbs (explain, queue update/delete,
submit's scheduling flags, the jobs table, the queue tree) say what the API knows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ADMIN, Shoal, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import Wiring
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec, Phase
from scheduler.store.rows import add_event
from scheduler.store.submission import submit_job
from scheduler.store.transitions import record_placement, set_phase


class OneLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        return [(1, 0, self.path)]


@pytest.fixture
def wiring(request: pytest.FixtureRequest, tmp_path: Path) -> Wiring:
    """A test parametrized with "one-log" reads its job's output from worker-0.log."""
    one = getattr(request, "param", None) == "one-log"
    return Wiring(log_source=OneLog(tmp_path / "worker-0.log")) if one else Wiring()


@pytest.mark.parametrize("wiring", ["one-log"], indirect=True)
def test_logs_are_not_wrapped_when_piped(
    app: FastAPI, client: TestClient, shoal: Shoal, tmp_path: Path
) -> None:
    """issue 25 item 3: a 600-character line came out as 8 lines of 80."""
    long = "x" * 300 + " " + "[bold]y[/bold] :smile: " + "z" * 300
    log = tmp_path / "worker-0.log"
    log.write_text(f"{long}\nsecond\rline\n")
    jid = client.post("/api/v1/jobs", json=job_body(name="wide"), headers=ADMIN).json()["id"]
    result = shoal("logs", jid)
    assert result.exit_code == 0, result.output
    assert result.output == f"w0 {long}\nw0 second\rline\n"


def test_job_shows_the_latest_progress_and_events_oldest_first(
    app: FastAPI, client: TestClient, shoal: Shoal
) -> None:
    """issue 25 item 5: the events query string was dropped, so the page came oldest
    first, was reversed, and the "latest" progress was the first one."""
    jid = client.post("/api/v1/jobs", json=job_body(name="steps"), headers=ADMIN).json()["id"]
    start = datetime.now(UTC) - timedelta(hours=1)
    with app.state.database.session() as s:
        for step in range(0, 141):
            at = start + timedelta(seconds=step)
            add_event(
                s, job_id=jid, kind="Progress", message=f"step {step}", data={"step": step}, at=at
            )
        add_event(s, job_id=jid, kind="Note", reason="First", at=start)
        add_event(s, job_id=jid, kind="Note", reason="Last", at=start + timedelta(seconds=200))
        s.commit()
    result = shoal("job", "steps")
    assert result.exit_code == 0, result.output
    assert "step 140" in result.output and not re.search(r"\bstep 0\b", result.output)
    assert result.output.index("First") < result.output.index("Last")


def test_explain_shows_the_decision_fair_share_and_candidates(
    client: TestClient, shoal: Shoal
) -> None:
    """issue 25 item 9: the numbers and candidates the explain endpoint has."""
    body = job_body(name="huge", gpu=8, workers=2)
    jid = client.post("/api/v1/jobs", json=body, headers=ADMIN).json()["id"]
    api = client.get(f"/api/v1/jobs/{jid}/explain", headers=ADMIN).json()
    result = shoal("explain", "huge")
    assert result.exit_code == 0, result.output
    assert f"decision {api['decision']}" in result.output
    assert "fair share" in result.output and "candidate nodes" in result.output
    for c in api["candidates"]:
        assert c["node"] in result.output
    assert "would place w1 on h2 gpus 0,1,2,3,4,5,6,7" in result.output
    # issue 35: a node with room for one of its two workers is "part", not "yes".
    assert api["candidates"][0] | {"reason": ""} == {
        "node": "h1",
        "fits": False,
        "reason": "",
        "workers": 1,
    }
    assert re.search(r"^ h1\s+part\s+chosen", result.output, re.M), result.output
    line = api["fairShare"][0]
    assert f"{line['guaranteed']:g}" in result.output and "vision" in result.output


def test_queues_update_and_delete_with_per_model_quotas(client: TestClient, shoal: Shoal) -> None:
    """issue 25 item 9: update keeps what is not given; MODEL=N sets a model's quota."""
    made = shoal("queues", "create", "lab", "--guaranteed", "2", "--guaranteed", "H100-80GB=1")
    assert made.exit_code == 0, made.output
    assert "guaranteed 2 H100-80GB:1" in made.output
    up = shoal("queues", "update", "lab", "--guaranteed", "H100-80GB=2", "--limit", "6")
    assert up.exit_code == 0, up.output
    q = client.get("/api/v1/queues/lab", headers=ADMIN).json()
    assert q["guaranteed"] == {"total": 2, "H100-80GB": 2} and q["limit"] == {"total": 6}
    up = shoal("queues", "update", "lab", "--limit", "none", "--weight", "3")
    assert up.exit_code == 0, up.output
    q = client.get("/api/v1/queues/lab", headers=ADMIN).json()
    assert q["limit"] is None and q["weight"] == 3 and q["guaranteed"]["total"] == 2
    bad = shoal("queues", "update", "lab", "--guaranteed", "H100=lots")
    assert bad.exit_code == 1 and "MODEL=NUMBER" in bad.output
    gone = shoal("queues", "delete", "lab")
    assert gone.exit_code == 0, gone.output
    assert client.get("/api/v1/queues/lab", headers=ADMIN).status_code == 404


def test_submit_writes_the_scheduling_flags(client: TestClient, shoal: Shoal) -> None:
    """issue 25 item 9: --grace, --preemptible, --gpu-type, --node-selector, --toleration."""
    args = ["submit", "--name", "flags", "--queue", "vision", "--gpu", "1", "--grace", "90"]
    args += ["--no-preemptible", "--gpu-type", "H100-80GB", "--gpu-type", "A100-40GB"]
    args += ["--node-selector", "zone=a", "--toleration", "gpu=shared:NoSchedule"]
    args += ["--toleration", "spot:NoExecute", "--", "python", "t.py"]
    result = shoal(*args)
    assert result.exit_code == 0, result.output
    spec = client.get("/api/v1/jobs", headers=ADMIN).json()["data"][0]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 90 and spec["preemptible"] is False
    assert spec["gpuType"] == ["H100-80GB", "A100-40GB"]
    assert spec["nodeSelector"] == {"zone": "a"}
    tolerations = [{k: v for k, v in t.items() if v} for t in spec["tolerations"]]
    assert tolerations == [
        {"key": "gpu", "operator": "Equal", "value": "shared", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]
    bad = shoal("submit", "--queue", "vision", "--toleration", "gpu:Never", "--", "x")
    assert bad.exit_code == 1 and "NoSchedule" in bad.output


def test_jobs_fits_80_columns_and_wide_shows_whole_ids_and_reasons(
    app: FastAPI, client: TestClient, shoal: Shoal
) -> None:
    """issue 25 item 9 (ids whole, not cut) and issue 35 (rows of 125-151 characters at 80
    columns): piped, the default is one line a row within 80 columns, the name whole and
    the reason cut; `-o wide` adds the whole id and submitter and the whole reason."""
    name = "a-rather-long-job-name-for-the-table"
    made = client.post("/api/v1/jobs", json=job_body(name=name), headers=ADMIN).json()
    jid = made["id"]
    with app.state.database.session() as s:
        set_phase(
            session=s,
            job_id=jid,
            expected_version=made["version"],
            phase=Phase.FAILED,
            reason="WorkerFailed",
            message="1: worker 0 exited with code 3 (out of memory on the GPU)",
        )
    result = shoal("jobs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 and max(map(len, lines)) <= 80, result.output
    assert name in result.output and "Worker" in result.output
    assert result.output.rstrip().endswith("…")
    wide = shoal("jobs", "-o", "wide")
    assert wide.exit_code == 0, wide.output
    assert "…" not in wide.output
    assert jid in wide.output and name in wide.output
    assert "SUBMITTER" in wide.output and "root" in wide.output
    assert "WorkerFailed: 1: worker 0 exited with code 3 (out of memory on the GPU)" in wide.output


def test_queues_is_a_tree_with_running_rolled_up(
    app: FastAPI, client: TestClient, shoal: Shoal
) -> None:
    """issue 25 item 9: a parent showed RUNNING 0 while its children ran jobs."""
    client.post("/api/v1/queues", json={"name": "dept", "guaranteed": 4}, headers=ADMIN)
    for team in ("team-a", "team-b"):
        body = {"name": team, "parent": "dept", "guaranteed": 2}
        assert client.post("/api/v1/queues", json=body, headers=ADMIN).status_code == 201
    with app.state.database.session() as s:
        for i, team in enumerate(("team-a", "team-b", "team-b")):
            spec = JobSpec(name=f"j{i}", queue=team, image="x", gpu=1)
            row, _ = submit_job(session=s, spec=spec, submitter="t")
            record_placement(
                session=s,
                job_id=row.id,
                expected_version=row.version,
                placements=[WorkerPlacement(0, "h1", (i,), 1.0)],
                attempt=1,
            )
    result = shoal("queues")
    assert result.exit_code == 0, result.output
    rows = {
        line.split()[0 if not line.lstrip().startswith("└") else 1]: line.split()
        for line in result.output.splitlines()[1:]
        if line.strip()
    }
    assert rows["dept"][-3:] == ["3", "3", "0"]  # ALLOCATED, RUNNING, PENDING
    assert rows["team-b"][-3:] == ["2", "2", "0"]
    out = result.output
    assert out.index("dept") < out.index("team-a") < out.index("team-b")
    assert "└ team-a" in out


def test_tokens_create_takes_the_user_as_the_docs_write_it(shoal: Shoal) -> None:
    """issue 25 item 10: `shoal tokens create prometheus --role metrics` (docs/dashboard.md)
    failed asking for --user."""
    made = shoal("tokens", "create", "prometheus", "--role", "metrics")
    assert made.exit_code == 0, made.output
    assert "for prometheus (metrics" in made.output
    both = shoal("tokens", "create", "a", "--user", "b")
    assert both.exit_code == 1 and "two users" in both.output
    assert shoal("tokens", "create", "--user", "dan", "-q", "vision").exit_code == 0


@pytest.mark.parametrize("wiring", ["one-log"], indirect=True)
def test_logs_over_one_call_are_printed_whole(
    app: FastAPI, client: TestClient, shoal: Shoal, tmp_path: Path
) -> None:
    """issue 25 item 3: the API gives 256 KiB a call; `shoal logs` stopped there, and a
    line across the limit came out as two."""
    first = "a" * (256 * 1024 - 10)
    across, tail = "b" * 100, "c" * 300_000
    log = tmp_path / "worker-0.log"
    log.write_text(f"{first}\n{across}\n{tail}\nno newline at the end")
    jid = client.post("/api/v1/jobs", json=job_body(name="big"), headers=ADMIN).json()["id"]
    result = shoal("logs", jid)
    assert result.exit_code == 0, result.output
    want = [f"w0 {x}" for x in (first, across, tail, "no newline at the end")]
    assert result.output.split("\n") == [*want, ""]


def test_submit_names_the_namespace_and_the_queue_bounds_it(
    client: TestClient, shoal: Shoal
) -> None:
    """issue 37 item 1: `-n` names the namespace the pods run in; `shoal job` shows it;
    a queue whose allowed.namespaces does not list it refuses the job, naming the field."""
    allow = {"allowed": {"namespaces": ["vision", "vision-*"]}}
    assert client.patch("/api/v1/queues/vision", json=allow, headers=ADMIN).status_code == 200
    made = shoal("submit", "--name", "ns", "--queue", "vision", "-n", "vision-dev", "--", "x")
    assert made.exit_code == 0, made.output
    (job,) = client.get("/api/v1/jobs", headers=ADMIN).json()["data"]
    assert job["spec"]["namespace"] == "vision-dev"
    shown = shoal("job", "ns")
    assert shown.exit_code == 0 and "namespace vision-dev" in shown.output, shown.output
    refused = shoal("submit", "--name", "nlp", "--queue", "vision", "-n", "nlp", "--", "x")
    assert refused.exit_code == 1, refused.output
    assert "namespace 'nlp' is not allowed" in refused.output, refused.output
    for ns, why in (("nlp", "is not allowed"), ("No_Such", "DNS-1123")):
        body = {"name": "b", "queue": "vision", "image": "img:1", "namespace": ns}
        r = client.post("/api/v1/jobs", json=body, headers=ADMIN)
        assert r.status_code == 422, r.text
        (detail,) = r.json()["detail"]
        assert detail["loc"] == ["body", "namespace"] and why in detail["msg"], r.text
    assert [j["name"] for j in client.get("/api/v1/jobs", headers=ADMIN).json()["data"]] == ["ns"]
