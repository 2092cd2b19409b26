"""REST API throughput: job submissions/s and p50/p99 latency, against SQLite and
PostgreSQL, with the same server's /healthz rate as the ceiling (not a test).

    .venv/bin/python bench/api_load.py [--requests 2000] [--concurrency 16]

Starts `uvicorn --factory api.app:app_from_env` (one worker) in a subprocess on a loopback
port, and a second process drives the load with httpx over TCP (threads, one keep-alive
client each). PostgreSQL is used when SHOAL_TEST_PG_URL is set (scripts/postgres.sh
start), in a schema of its own that is dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

TOKENS = "bench-admin: {user: bench, role: admin}"
AUTH = {"Authorization": "Bearer bench-admin"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drive(url: str, path: str, n: int, concurrency: int) -> dict[str, float]:
    """Send `n` requests (POST a job, or GET) from `concurrency` threads; latencies in ms."""
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(n))
    errors = 0

    def worker() -> None:
        nonlocal errors
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
            for i in counter:
                t = time.perf_counter()
                if path == "/api/v1/jobs":
                    body = {"name": f"j{i}", "queue": "bench", "image": "img:1", "gpu": 0.5}
                    r = c.post(path, json=body)
                else:
                    r = c.get(path)
                dt = (time.perf_counter() - t) * 1000
                with lock:
                    latencies.append(dt)
                    errors += r.status_code >= 400

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"rps": n / wall, "p50_ms": q[49], "p99_ms": q[98], "errors": errors}


def _serve(db_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "SHOAL_DATABASE_URL": db_url, "SHOAL_API_TOKENS": TOKENS}
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "api.app:app_from_env",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
           "--no-access-log"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("server did not start")
        time.sleep(0.1)


def _drive_in_child(url: str, path: str, n: int, concurrency: int) -> dict[str, float]:
    args = [sys.executable, __file__, "drive", url, path, str(n), str(concurrency)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out)
    return result


def bench(label: str, db_url: str, n: int, concurrency: int) -> list[str]:
    proc, url = _serve(db_url)
    try:
        httpx.post(f"{url}/api/v1/queues", json={"name": "bench"}, headers=AUTH)
        _drive_in_child(url, "/healthz", 200, concurrency)  # warm up
        rows = []
        for what, path in (("/healthz (ceiling)", "/healthz"), ("POST /jobs", "/api/v1/jobs")):
            r = _drive_in_child(url, path, n, concurrency)
            rows.append(
                f"| {label} | {what} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
                f"| {int(r['errors'])} |"
            )
        return rows
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "drive":
        url, path, n, c = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(drive(url, path, n, c)))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    rows = [
        "| database | endpoint | req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        rows += bench("SQLite", f"sqlite:///{tmp}/bench.db", args.requests, args.concurrency)
    pg = os.environ.get("SHOAL_TEST_PG_URL")
    if pg:
        from sqlalchemy import create_engine, text

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        try:
            sep = "&" if "?" in pg else "?"
            url = f"{pg}{sep}options=-csearch_path%3D{schema}"
            rows += bench("PostgreSQL", url, args.requests, args.concurrency)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    else:
        rows.append("| PostgreSQL | skipped: SHOAL_TEST_PG_URL not set | | | | |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
