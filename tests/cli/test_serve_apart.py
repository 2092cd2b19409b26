"""Plain `shoal serve` (local backend) runs its API and its scheduler loop in two
processes under the one command (issue 39): the API in a child of the scheduler's, on
the port the parent bound, that dies with it; one state directory, one Ctrl-C. What the
API took from the loop in one process crosses over: wakes, /healthz, /metrics, logs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from support.serve import ROOT, START_S, free_port
from support.wait import eventually

from scheduler.cli.loopshare import Pulse, RemoteSeries, serve_series

pytestmark = pytest.mark.integration  # starts `shoal serve` and its workers


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    port: int
    state: Path
    http: httpx.Client


def api_pid(parent: int) -> int | None:
    """The pid of `parent`'s API process, if it has one alive."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == parent and b"scheduler.cli.apiproc" in cmdline:
            return int(entry.name)
    return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def serving(tmp: Path, *, port: int | None = None, interval: str = "0.5") -> Iterator[Served]:
    port = port or free_port()
    state = tmp / "state"
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHOAL_SHARED_USER_OK": "1"}
    env.pop("SHOAL_TOKEN", None)
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port)]
    cmd += ["--state-dir", str(state), "--min-runtime", "0", "--interval", interval]
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:

        def up() -> bool:
            assert proc.poll() is None, proc.communicate()[0]
            token = state / "admin-token"
            return token.exists() and httpx.get(f"{url}/healthz", timeout=30).is_success

        eventually(up, START_S, every=0.1, what="shoal serve", retry_on=(httpx.HTTPError,))
        token = (state / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            yield Served(proc, url, port, state, http)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=60)


def submit(http: httpx.Client, command: list[str]) -> str:
    body = {"name": "j", "queue": "q", "image": "local", "gpu": 1, "command": command}
    r = http.post("/api/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    return job_id


def phase(http: httpx.Client, job_id: str) -> str:
    job: dict[str, Any] = http.get(f"/api/v1/jobs/{job_id}").json()
    return str(job["phase"])


def test_the_api_runs_apart_and_a_submission_wakes_the_loop(tmp_path: Path) -> None:
    # An hour between cycles: only the submission's wake can place the job.
    with serving(tmp_path, interval="3600") as s:
        child = eventually(lambda: api_pid(s.proc.pid), what="the API process")
        assert child != s.proc.pid
        assert s.http.post("/api/v1/queues", json={"name": "q"}).status_code == 201
        job_id = submit(s.http, ["python", "-c", "print('hello from the worker')"])
        eventually(lambda: phase(s.http, job_id) == "Succeeded", what="the job to run")
        # The worker's log is read from the state directory by the API process.
        logs = s.http.get(f"/api/v1/jobs/{job_id}/logs").text
        assert "hello from the worker" in logs
        # The loop's series come from the scheduler's process, once each.
        text = s.http.get("/metrics").text
        assert text.count("# TYPE shoal_scheduling_cycles_total counter") == 1
        assert text.count("# TYPE shoal_scheduling_cycle_duration_seconds histogram") == 1
        assert "shoal_leader 1.0" in text
        cycles = next(
            line for line in text.splitlines() if line.startswith("shoal_scheduling_cycles_total")
        )
        assert float(cycles.split()[1]) >= 2  # the first cycle at start, then the wake's
        assert "shoal_api_request_seconds_count" in text and "shoal_queue_" in text
        assert s.http.get("/healthz").json() == {"status": "ok"}


def test_ctrl_c_stops_both_processes(tmp_path: Path) -> None:
    with serving(tmp_path) as s:
        child = eventually(lambda: api_pid(s.proc.pid), what="the API process")
        s.proc.send_signal(signal.SIGINT)
        out, _ = s.proc.communicate(timeout=120)
        assert s.proc.returncode == 0, out
        assert "Shoal stopped" in out
        eventually(lambda: not alive(child), what="the API process to stop")
        assert port_free(s.port)


def test_a_killed_server_leaves_no_process_on_its_port(tmp_path: Path) -> None:
    with serving(tmp_path) as s:
        child = eventually(lambda: api_pid(s.proc.pid), what="the API process")
        s.proc.kill()  # as a crash point does: no clean-up runs
        s.proc.wait(timeout=60)
        eventually(lambda: not alive(child), what="the API process to die with its parent")
        eventually(lambda: port_free(s.port), what="the port to be free")
    # The next start on the same port and state directory serves.
    with serving(tmp_path, port=s.port) as again:
        assert again.http.get("/healthz").json() == {"status": "ok"}


def test_the_server_stops_when_its_api_process_dies(tmp_path: Path) -> None:
    with serving(tmp_path) as s:
        child = eventually(lambda: api_pid(s.proc.pid), what="the API process")
        os.kill(child, signal.SIGKILL)
        out, _ = s.proc.communicate(timeout=120)
        assert s.proc.returncode != 0
        assert f"the API process (pid {child}) exited" in out and "Shoal stopped" in out


def test_healthz_reads_a_stalled_or_stopped_loop_from_the_pulse() -> None:
    pulse = Pulse.create()
    reader = Pulse(pulse.fd, writable=False)
    check = reader.health(stall_s=120)
    pulse.write(time.monotonic(), alive=True)
    assert check() is None
    pulse.write(time.monotonic() - 600, alive=True)
    assert (check() or "").startswith("scheduler loop stalled: one cycle has run 600s")
    pulse.write(time.monotonic(), alive=False)
    assert check() == "scheduler loop stopped: its thread has exited"


def test_the_loop_series_cross_over_once() -> None:
    loop = CollectorRegistry()
    cycles = Counter("shoal_scheduling_cycles", "scheduling cycles run", registry=loop)
    cycles.inc(3)
    theirs = serve_series(loop)
    api = CollectorRegistry()
    api.register(RemoteSeries(theirs.detach()))
    assert generate_latest(api) == generate_latest(loop)
