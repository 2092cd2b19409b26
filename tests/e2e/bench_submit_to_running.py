"""Submit-to-running on `shoal serve` with the local backend (docs/benchmarks.md):

    .venv/bin/python tests/e2e/bench_submit_to_running.py [REPEATS]

Starts a server, then for each shape submits a job REPEATS times through the REST API
and measures the time from the POST until the job is Running (every worker process
started and seen by the loop), polling every 10 ms. Prints median and max per shape.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).parents[2]
SHAPES = [(1, 1.0), (2, 0.5), (4, 0.25), (8, 1.0)]


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SHOAL_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                if (state / "admin-token").exists() and httpx.get(f"{url}/healthz").is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        token = (state / "admin-token").read_text().strip()
        http = httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"})
        http.post("/queues", json={"name": "bench", "guaranteed": {"total": 8}}).raise_for_status()
        for workers, gpu in SHAPES:
            times = []
            for i in range(repeats):
                body = {
                    "name": f"b{workers}-{i}",
                    "queue": "bench",
                    "image": "local",
                    "workers": workers,
                    "gpu": gpu,
                    "cpu": "100m",
                    "memory": "64Mi",
                    "command": ["python", "-c", "import time; time.sleep(0.5)"],
                }
                t0 = time.perf_counter()
                job = http.post("/jobs", json=body).json()
                while http.get(f"/jobs/{job['id']}").json()["phase"] != "Running":
                    time.sleep(0.01)
                times.append(time.perf_counter() - t0)
                while http.get(f"/jobs/{job['id']}").json()["phase"] == "Running":
                    time.sleep(0.05)
            print(
                f"{workers} x {gpu:g} GPU: median {statistics.median(times) * 1000:.0f} ms, "
                f"max {max(times) * 1000:.0f} ms over {repeats}"
            )
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
