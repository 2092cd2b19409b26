"""REST API throughput under an open-loop load (not a test): job submissions at a fixed
offered rate against a fresh `shoal serve` per configuration, SQLite and PostgreSQL, with
the same server's /healthz rate as the ceiling.

    nice .venv/bin/python -m bench.api_load [--rates 0,50,200,600] [--duration 10]

Rate 0 is the capacity row: submissions as fast as the server answers them (closed loop,
32 clients), so its "achieved / healthz" is the ratio issue 15 sets a goal for.

Each configuration (database x offered rate) starts its own `shoal serve` (local backend,
the default 2 nodes x 4 GPUs, the scheduler loop running) in a fresh state directory, and
a second process drives it with aiohttp: request i is due at t0 + i/rate whether or not
earlier ones have been answered (open loop), and its latency runs from that due time, so
a server that falls behind is charged for the queueing it causes. Reported per row:
offered and achieved rate (2xx per second over the run), p50/p99 of the admitted
submissions, how many were shed (429/503) and how fast, other errors, and the /healthz
rate of the same server (closed loop, 32 connections). PostgreSQL runs when
SHOAL_TEST_PG_URL is set (scripts/postgres.sh start), each server in a schema of its own
that is dropped afterwards. Jobs run `sleep` for a few seconds so that no worker outlives
the benchmark for long.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.serving import ROOT, free_port, pg_schema, serving

JOB_SECONDS = "5"


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


class _Outcomes:
    """What the submissions of one open-loop run got: latencies (ms from their due time)
    of the admitted and of the shed ones, other answers by status or error."""

    def __init__(self) -> None:
        self.ok: list[float] = []
        self.shed: list[float] = []
        self.other: dict[str, int] = {}
        self.retry_after_missing = 0

    def count(self, what: str) -> None:
        self.other[what] = self.other.get(what, 0) + 1

    def record(self, status: int, has_retry: bool, dt: float) -> None:
        if status in (200, 201):
            self.ok.append(dt)
        elif status in (429, 503):
            self.shed.append(dt)
            self.retry_after_missing += not has_retry
        else:
            self.count(str(status))

    def row(self, rate: float, n: int, wall: float, duration: float) -> dict[str, Any]:
        return {
            "offered": rate,
            "sent": n,
            "ok": len(self.ok),
            "achieved": len(self.ok) / max(wall, duration),
            "p50_ms": _quantile(self.ok, 0.50),
            "p99_ms": _quantile(self.ok, 0.99),
            "shed": len(self.shed),
            "shed_p99_ms": _quantile(self.shed, 0.99),
            "retry_after_missing": self.retry_after_missing,
            "errors": self.other,
            "wall_s": wall,
        }


async def _open_loop(url: str, token: str, rate: float, duration: float) -> dict[str, Any]:
    import aiohttp

    n = int(rate * duration)
    run = uuid.uuid4().hex[:6]
    got = _Outcomes()
    headers = {"Authorization": f"Bearer {token}"}
    # Generous client limits: the server, not the driver, must be what queues.
    conn = aiohttp.TCPConnector(limit=2000)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        base_url=url, headers=headers, connector=conn, timeout=timeout
    ) as client:
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05

        async def one(i: int) -> None:
            due = t0 + i / rate
            await asyncio.sleep(max(0.0, due - loop.time()))
            body = {
                "name": f"j{run}-{i}",
                "queue": "bench",
                "image": "img:1",
                "gpu": 0.5,
                "command": ["sleep", JOB_SECONDS],
            }
            try:
                async with client.post("/api/v1/jobs", json=body) as r:
                    await r.read()
                    status = r.status
                    has_retry = "Retry-After" in r.headers
            except (aiohttp.ClientError, TimeoutError) as e:
                got.count(type(e).__name__)
                return
            got.record(status, has_retry, (loop.time() - due) * 1000)

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = loop.time() - t0
    return got.row(rate, n, wall, duration)


async def _healthz(url: str, duration: float, concurrency: int = 32) -> dict[str, Any]:
    import aiohttp

    count = 0
    async with aiohttp.ClientSession(base_url=url) as client:
        loop = asyncio.get_running_loop()
        end = loop.time() + duration

        async def worker() -> None:
            nonlocal count
            while loop.time() < end:
                async with client.get("/healthz") as r:
                    await r.read()
                    count += r.status == 200

        t0 = loop.time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = loop.time() - t0
    return {"healthz_rps": count / wall, "healthz_n": count}


async def _closed_jobs(
    url: str, token: str, duration: float, concurrency: int = 32
) -> dict[str, Any]:
    """Submissions as fast as the server answers them (closed loop, like `_healthz`): the
    server's submission capacity, to set against its /healthz rate."""
    import aiohttp

    ok: list[float] = []
    other: dict[str, int] = {}
    run = uuid.uuid4().hex[:6]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(base_url=url, headers=headers) as client:
        loop = asyncio.get_running_loop()
        end = loop.time() + duration

        async def worker(w: int) -> None:
            i = 0
            while loop.time() < end:
                i += 1
                body = {
                    "name": f"c{run}-{w}-{i}",
                    "queue": "bench",
                    "image": "img:1",
                    "gpu": 0.5,
                    "command": ["sleep", JOB_SECONDS],
                }
                t = loop.time()
                async with client.post("/api/v1/jobs", json=body) as r:
                    await r.read()
                if r.status == 201:
                    ok.append((loop.time() - t) * 1000)
                else:
                    other[str(r.status)] = other.get(str(r.status), 0) + 1

        t0 = loop.time()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall = loop.time() - t0
    return {
        "offered": 0.0,
        "sent": len(ok) + sum(other.values()),
        "ok": len(ok),
        "achieved": len(ok) / wall,
        "p50_ms": _quantile(ok, 0.50),
        "p99_ms": _quantile(ok, 0.99),
        "shed": other.pop("503", 0) + other.pop("429", 0),
        "shed_p99_ms": float("nan"),
        "retry_after_missing": 0,
        "errors": other,
        "wall_s": wall,
    }


def _drive_in_child(*args: str) -> dict[str, Any]:
    """The driver runs in a process of its own, so it does not share the server's GIL."""
    cmd = [sys.executable, "-m", "bench.api_load", "drive", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    result: dict[str, Any] = json.loads(out)
    return result


@contextmanager
def _serve(db_url: str | None, extra_env: dict[str, str]) -> Iterator[tuple[str, str, int]]:
    """A fresh `shoal serve` on a loopback port; yields (url, admin token, pid)."""
    state = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    port = free_port()
    # BENCH_SERVE_WRAPPER: a script that runs the shoal CLI with these arguments (a profiler).
    wrapper = extra_env.get("BENCH_SERVE_WRAPPER")
    entry = [wrapper] if wrapper else ["-m", "scheduler.cli.main"]
    cmd = [sys.executable, *entry, "serve", "--port", str(port), "--state-dir", str(state)]
    if db_url:
        cmd += ["--database-url", db_url]
    env = {**os.environ, **extra_env}
    env.pop("SHOAL_API_TOKENS_FILE", None)
    if extra_env.get("BENCH_API_ONLY"):  # the API alone (no scheduler loop): its own cost
        (state / "admin-token").write_text("bench-admin")
        env["SHOAL_API_TOKENS"] = "bench-admin: {user: admin, role: admin}"
        env["SHOAL_DATABASE_URL"] = db_url or f"sqlite:///{state / 'shoal.db'}"
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "api.app:app_from_env",
               "--port", str(port), "--log-level", "warning"]  # fmt: skip
    with serving(cmd, env, state, port) as (url, proc):
        yield url, (state / "admin-token").read_text().strip(), proc.pid


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the server has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(
    label: str,
    db_url: str | None,
    rate: float,
    duration: float,
    env: dict[str, str],
    py_spy: str | None = None,
) -> dict[str, Any]:
    """One row on a fresh server: its /healthz rate, then submissions offered at `rate`
    (open loop), or with `rate` 0 as fast as it answers them (closed loop, 32 clients)."""
    import httpx

    with _serve(db_url, env) as (url, token, pid):
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{url}/api/v1/queues", json={"name": "bench"}, headers=auth)
        r.raise_for_status()
        _drive_in_child("healthz", url, "1")  # warm up
        cpu0 = _cpu_s(pid)
        ceiling = _drive_in_child("healthz", url, "3")
        cpu1 = _cpu_s(pid)
        ceiling["healthz_cpu_ms"] = (cpu1 - cpu0) * 1000 / max(ceiling["healthz_n"], 1)
        spy = None
        if py_spy:  # sample the server's threads while it takes submissions (collapsed stacks)
            out = f"{label.lower()}-{rate:.0f}.txt"
            spy_args = f"record -p {pid} -f raw -o {out} -t -r 100 -d {int(duration)}"
            spy = subprocess.Popen(
                [py_spy, *spy_args.split()],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cpu0 = _cpu_s(pid)
        if rate > 0:
            result = _drive_in_child("jobs", url, token, str(rate), str(duration))
        else:
            result = _drive_in_child("capacity", url, token, str(duration))
        # Server CPU per request (all threads, the scheduler loop's included): unlike
        # rates, it barely moves when other processes share the machine's cores.
        answered = result["ok"] + result["shed"]
        result["cpu_ms"] = (_cpu_s(pid) - cpu0) * 1000 / max(answered, 1)
        if spy is not None:
            spy.wait(60)
    return {"database": label, **result, **ceiling}


def _row(r: dict[str, Any]) -> str:
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "0"
    shed = f"{r['shed']}" + (f" (p99 {r['shed_p99_ms']:.0f} ms)" if r["shed"] else "")
    ratio = r["achieved"] / r["healthz_rps"]
    offered = f"{r['offered']:.0f}/s" if r["offered"] > 0 else "closed loop, 32 clients"
    return (
        f"| {r['database']} | {offered} | {r['achieved']:.0f}/s | "
        f"{r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {shed} | {errors} | "
        f"{r['healthz_rps']:.0f}/s | {ratio:.2f} | {r['cpu_ms']:.2f} ms "
        f"| {r['healthz_cpu_ms']:.2f} ms |"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "drive":
        what, url = sys.argv[2], sys.argv[3]
        if what == "healthz":
            out = asyncio.run(_healthz(url, float(sys.argv[4])))
        elif what == "capacity":
            out = asyncio.run(_closed_jobs(url, sys.argv[4], float(sys.argv[5])))
        else:
            token, rate, duration = sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
            out = asyncio.run(_open_loop(url, token, rate, duration))
        print(json.dumps(out))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rates", default="0,50,200,600", help="offered submissions/s (0: closed loop)"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--py-spy", help="py-spy binary: profile each server (<db>-<rate>.txt)")
    args = parser.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    rates = [float(x) for x in args.rates.split(",")]
    dbs = args.databases.split(",")
    rows: list[dict[str, Any]] = []
    print(
        "| database | offered | achieved | p50 | p99 | shed 429/503 | other errors "
        "| /healthz | achieved / healthz | server CPU / submission | server CPU / healthz |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    pg = os.environ.get("SHOAL_TEST_PG_URL")
    for db in dbs:
        for rate in rates:
            if db == "sqlite":
                r = bench("SQLite", None, rate, args.duration, env, args.py_spy)
            elif pg:
                with pg_schema(pg) as url:
                    r = bench("PostgreSQL", url, rate, args.duration, env, args.py_spy)
            else:
                print("| PostgreSQL | skipped: SHOAL_TEST_PG_URL not set |", flush=True)
                break
            rows.append(r)
            print(_row(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
