"""End to end through HTTP and the CLI on `shoal serve`: a reclaim that preempts a
borrower, four 0.25-GPU workers sharing one GPU (a job that opted out of distinct
GPUs), and the DDP example to Succeeded on two GPUs (NCCL ranks never share one)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from support.wait import eventually

from .conftest import Server

pytestmark = pytest.mark.slow


def wait_for(server: Server, job_id: str, phases: set[str], timeout: float = 60) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job: dict[str, Any] = server.http.get(f"/jobs/{job_id}").json()
        return job if job["phase"] in phases else None

    found: dict[str, Any] = eventually(reached, timeout, what=f"{job_id} to reach {phases}")
    return found


def test_reclaim_preempts_borrower_and_fractions_share_a_gpu(server: Server) -> None:
    server.shoal("queues", "create", "research", "--guaranteed", "2")
    server.shoal("queues", "create", "prod", "--guaranteed", "6")
    # research borrows the whole cluster (8 GPUs against a guarantee of 2).
    out = server.shoal(
        "submit",
        "--name",
        "borrower",
        "--queue",
        "research",
        "--workers",
        "8",
        "--gpu",
        "1",
        "--",
        "python",
        "-c",
        "import time; time.sleep(120)",
    ).stdout
    borrower = re.search(r"id (\w+)", out).group(1)  # type: ignore[union-attr]
    wait_for(server, borrower, {"Running"})
    # prod comes back for its guarantee: four workers of a quarter GPU each. They run
    # until the test lets them finish, so that what is checked meanwhile does not
    # depend on how fast a loaded machine gets there.
    done = server.state.parent / "owner-may-finish"
    wait_for_flag = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.1)"
    t0 = time.perf_counter()
    resp = server.http.post(
        "/jobs",
        json={
            "name": "owner",
            "queue": "prod",
            "image": "local",
            "workers": 4,
            "gpu": 0.25,
            "distinctGpus": False,  # not NCCL ranks: they may share a GPU
            "command": ["python", "-c", wait_for_flag],
        },
    )
    assert resp.status_code == 201, resp.text
    owner = resp.json()["id"]
    job = wait_for(server, owner, {"Running"})
    submit_to_running = time.perf_counter() - t0
    print(f"submit to running with a reclaim: {submit_to_running:.2f}s")
    gpus = {(p["node"], tuple(p["gpus"])) for p in job["placements"]}
    assert len(gpus) == 1 and [p["fraction"] for p in job["placements"]] == [0.25] * 4
    back = server.http.get(f"/jobs/{borrower}").json()
    assert back["phase"] == "Pending" and back["restarts"] == 1
    kinds = [e["kind"] for e in server.http.get(f"/jobs/{borrower}/events").json()["data"]]
    assert "Preempted" in kinds and kinds[-1] == "Pending"
    shown = server.shoal("job", "borrower").stdout
    assert "Preempted" in shown and "pending" in shown
    nodes = server.shoal("nodes").stdout
    assert nodes.count("owner/w") == 4 and "1.00" in nodes
    done.touch()
    wait_for(server, owner, {"Succeeded"})
    server.shoal("cancel", "borrower")
    wait_for(server, borrower, {"Cancelled"})


def test_ddp_example_succeeds_with_falling_loss(server: Server) -> None:
    server.shoal("queues", "create", "default", "--guaranteed", "8")
    t0 = time.perf_counter()
    out = server.shoal("submit", "-f", "examples/pytorch-ddp/job.yaml").stdout
    job_id = re.search(r"id (\w+)", out).group(1)  # type: ignore[union-attr]
    running = wait_for(server, job_id, {"Running"})
    gpus = [(p["node"], tuple(p["gpus"])) for p in running["placements"]]
    assert len(set(gpus)) == 2, gpus  # two ranks, two GPUs
    print(f"submit to running, DDP example: {time.perf_counter() - t0:.2f}s")
    logs = server.shoal("logs", "ddp-example", "-f", "--worker", "0")
    assert logs.returncode == 0 and "Succeeded" in logs.stdout
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", logs.stdout)]
    assert len(losses) >= 5 and losses[-1] < losses[0] / 4, losses
    job = server.http.get(f"/jobs/{job_id}").json()
    events = server.http.get(f"/jobs/{job_id}/events").json()["data"]
    logs1 = sorted((server.state / "jobs" / job_id / "1").glob("worker-*.log"))
    why = [e["message"] for e in events] + [p.read_text()[-1500:] for p in logs1]
    assert job["phase"] == "Succeeded" and job["restarts"] == 0, why
    # The workers reported progress with the token of their own job (no all-queues token).
    assert any(e["kind"] == "Progress" for e in events), why
    assert not (server.state / "worker-token").exists()
