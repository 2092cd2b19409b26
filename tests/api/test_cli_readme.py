"""The README's CLI commands, as written there, against the real API app in-process
(issue 35: a command quoted in the README that no test runs is a defect). Placeholders
are filled (NAME|ID with a job's name, then its id; `[...]` with what it names); every
other word is the README's. tests/test_docs_commands.py maps each README line here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ADMIN, NODES, Shoal
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import Wiring
from scheduler.model import Node, Taint
from scheduler.store.cluster import save_inventory

# The README's cluster: a GPU model named "H100" (the fixture's is "H100-80GB") on a node
# labelled zone=a and tainted gpu=shared, so that its submit line is feasible as written.
README_NODE = Node(
    "z1", 96_000, 1_000_000, 8, "H100", 81920,
    labels={"zone": "a"}, taints=(Taint("gpu", "shared", "NoSchedule"),),
)  # fmt: skip


class TwoLogs:
    """Worker 0's and worker 1's output (attempt 1), for `logs NAME|ID [--worker N]`."""

    def __init__(self, where: Path) -> None:
        self.where = where

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        files = []
        for worker in (0, 1):
            path = self.where / f"worker-{worker}.log"
            path.write_text(f"step 1 from worker {worker}\n")
            files.append((1, worker, path))
        return files


@pytest.fixture
def wiring(tmp_path: Path) -> Wiring:
    return Wiring(log_source=TwoLogs(tmp_path))


def ok(shoal: Shoal, *argv: str) -> str:
    result = shoal(*argv)
    assert result.exit_code == 0, f"shoal {' '.join(argv)} -> {result.exit_code}\n{result.output}"
    assert "Traceback" not in result.output, result.output
    return result.output


def test_the_everyday_block_runs_as_the_readme_writes_it(
    app: FastAPI, client: TestClient, shoal: Shoal
) -> None:
    """README "The CLI", line by line, in its order."""
    with app.state.database.session() as s:
        save_inventory(session=s, nodes=(*NODES, README_NODE))
    out = ok(shoal, "submit", "--queue", "vision", "--workers", "2", "--gpu", "0.5",
             "--gpu-type", "H100", "--grace", "120", "--no-preemptible",
             "--node-selector", "zone=a", "--toleration", "gpu=shared:NoSchedule",
             "--", "python", "train.py")  # fmt: skip
    assert "submitted" in out
    job = client.get("/api/v1/jobs", headers=ADMIN).json()["data"][0]
    name, jid = job["name"], job["id"]
    assert job["spec"]["gpuType"] == ["H100"] and job["spec"]["nodeSelector"] == {"zone": "a"}
    ok(shoal, "jobs")
    ok(shoal, "jobs", "--queue", "vision", "--phase", "Failed")
    assert name in ok(shoal, "jobs", "--queue", "vision")
    assert jid in ok(shoal, "jobs", "-o", "wide")
    for ref in (name, jid):
        assert name in ok(shoal, "job", ref)
        assert json.loads(ok(shoal, "job", ref, "-o", "json"))["id"] == jid
        assert yaml.safe_load(ok(shoal, "job", ref, "-o", "yaml"))["id"] == jid
        ok(shoal, "explain", ref)
        assert "from worker 0" in ok(shoal, "logs", ref)
        assert "from worker 1" in ok(shoal, "logs", ref, "--worker", "1")
    ok(shoal, "cancel", name)
    ok(shoal, "delete", name)
    ok(shoal, "queues")
    ok(shoal, "queues", "create", "dept", "--guaranteed", "0")  # for `[--parent dept]`
    ok(shoal, "queues", "delete", "vision")  # the fixture's, to create it as written
    ok(shoal, "queues", "create", "vision", "--guaranteed", "8", "--guaranteed", "H100=4",
       "--limit", "12", "--parent", "dept")  # fmt: skip
    ok(shoal, "queues", "update", "vision", "--guaranteed", "H100=6", "--limit", "none",
       "--weight", "2")  # fmt: skip
    ok(shoal, "queues", "delete", "vision")
    ok(shoal, "queues", "create", "vision", "--guaranteed", "8", "--guaranteed", "H100=4",
       "--limit", "12")  # fmt: skip
    ok(shoal, "tokens", "create", "alice", "-q", "vision")
    ok(shoal, "tokens", "create", "prometheus", "--role", "metrics")


def test_the_auth_block_and_the_first_steps_run_as_written(
    client: TestClient, shoal: Shoal
) -> None:
    """README "Auth" (create, list, revoke <id>) and "Using it" (queues create default,
    jobs, nodes, simulate --help; submit -f and logs -f run to the end in
    tests/e2e/test_user_path.py)."""
    ok(shoal, "tokens", "create", "alice", "--role", "member", "-q", "vision")
    listed = json.loads(ok(shoal, "tokens", "list", "-o", "json"))["items"]
    assert "alice" in ok(shoal, "tokens", "list")
    alice = next(t for t in listed if t["user"] == "alice")
    ok(shoal, "tokens", "revoke", alice["id"])
    ok(shoal, "queues", "create", "default", "--guaranteed", "8")
    ok(shoal, "jobs")
    assert "h1" in ok(shoal, "nodes")
    assert "simulate" in ok(shoal, "simulate", "--help")
    assert "--follow" in ok(shoal, "submit", "--help")  # `shoal COMMAND --help`
