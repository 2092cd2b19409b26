"""REST API throughput under an open-loop load (not a test): job submissions at a fixed
offered rate against a fresh `shoal serve` per configuration, SQLite and PostgreSQL, with
the same server's /healthz rate as the ceiling.

    nice .venv/bin/python -m bench.api_load [--rates 0,50,200,600] [--duration 10] [--split]

Rate 0 is the capacity row: submissions as fast as the server answers them (closed loop,
32 clients), so its "achieved / healthz" is the ratio issue 15 sets a goal for.

Each configuration (database x offered rate) starts its own `shoal serve` (local backend,
the default 2 nodes x 4 GPUs, the scheduler loop running) in a fresh state directory, and
a second process (`bench.api_drive`) drives it with aiohttp: request i is due at t0 +
i/rate whether or not earlier ones have been answered (open loop), and its latency runs
from that due time, so a server that falls behind is charged for the queueing it causes.
Reported per row:
offered and achieved rate (2xx per second over the run), p50/p99 of the admitted
submissions, how many were shed (429/503) and how fast, other errors, and the /healthz
rate of the same server (closed loop, 32 connections). PostgreSQL runs when
SHOAL_TEST_PG_URL is set (scripts/postgres.sh start), each server in a schema of its own
that is dropped afterwards. Jobs run `sleep` for a few seconds so that no worker outlives
the benchmark for long.

`--split` runs each configuration as two processes instead (`bench.api_split`): `shoal serve
--role scheduler --backend kubernetes` against a loopback control plane with kwok nodes, and
`shoal serve --role api` (`--api-workers`, default 2, on PostgreSQL) on the same store; the
driver talks to the API process exactly as above, and the server CPU columns are the API
process's (its workers included; the scheduler's CPU per submission and the worker pods it made
are in `--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.api_split import Split, control_plane, serve_split, tree_cpu_s, worker_pods
from bench.serving import ROOT, free_port, pg_schema, serving


def _drive_in_child(*args: str) -> dict[str, Any]:
    """The driver runs in a process of its own, so it does not share the server's GIL."""
    cmd = [sys.executable, "-m", "bench.api_drive", *args]
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
    env = {**os.environ, **extra_env}
    if db_url:  # the environment, not --database-url: any local user reads arguments
        env["SHOAL_DATABASE_URL"] = db_url
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
    """CPU seconds (user + system, all threads) the server has used so far: `shoal serve`
    and its API process (`scheduler.cli.apiproc`), not its workers."""
    total = 0.0
    for p in [pid, *_api_processes(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _api_processes(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"scheduler.cli.apiproc" in cmdline:
                found.append(int(child))
    return found


def bench(
    label: str,
    db_url: str | None,
    rate: float,
    duration: float,
    env: dict[str, str],
    py_spy: str | None = None,
    split: Split | None = None,
) -> dict[str, Any]:
    """One row on a fresh server: its /healthz rate, then submissions offered at `rate`
    (open loop), or with `rate` 0 as fast as it answers them (closed loop, 32 clients).
    With `split`, the server is an API process beside a scheduler process."""
    import httpx

    with ExitStack() as stack:
        sched_pid = None
        if split is None:
            url, token, pid = stack.enter_context(_serve(db_url, env))
            cpu = _cpu_s
        else:
            url, token, pid, sched_pid = stack.enter_context(serve_split(db_url, env, split))
            cpu = tree_cpu_s
            label += f", api{f' ({split.api_workers} workers)' if db_url else ''} + scheduler"
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{url}/api/v1/queues", json={"name": "bench"}, headers=auth)
        r.raise_for_status()
        _drive_in_child("healthz", url, "1")  # warm up
        cpu0 = cpu(pid)
        ceiling = _drive_in_child("healthz", url, "3")
        cpu1 = cpu(pid)
        ceiling["healthz_cpu_ms"] = (cpu1 - cpu0) * 1000 / max(ceiling["healthz_n"], 1)
        spy = None
        if py_spy:  # sample the server's threads while it takes submissions (collapsed stacks)
            out = f"{label.split(',')[0].lower()}{'-split' if split else ''}-{rate:.0f}.txt"
            spy_args = f"record -p {pid} -f raw -o {out} -t -r 100 -d {int(duration)}"
            spy_args += " --subprocesses" if split else ""  # the API's uvicorn workers
            spy = subprocess.Popen(
                [py_spy, *spy_args.split()],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cpu0 = cpu(pid)
        sched0 = tree_cpu_s(sched_pid) if sched_pid else 0.0
        if rate > 0:
            result = _drive_in_child("jobs", url, token, str(rate), str(duration))
        else:
            result = _drive_in_child("capacity", url, token, str(duration))
        # Server CPU per request (all threads, the scheduler loop's included; with
        # `split` the API process and its workers, the scheduler's apart): unlike rates,
        # it barely moves when other processes share the machine's cores.
        answered = result["ok"] + result["shed"]
        result["cpu_ms"] = (cpu(pid) - cpu0) * 1000 / max(answered, 1)
        if split is not None and sched_pid is not None:
            result["scheduler_cpu_ms"] = (tree_cpu_s(sched_pid) - sched0) * 1000 / max(answered, 1)
            result["worker_pods"] = worker_pods(split)
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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rates", default="0,50,200,600", help="offered submissions/s (0: closed loop)"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--py-spy", help="py-spy binary: profile each server (<db>-<rate>.txt)")
    parser.add_argument(
        "--split", action="store_true", help="an API process beside a scheduler process"
    )
    parser.add_argument("--api-workers", type=int, default=2, help="--split, PostgreSQL")
    parser.add_argument(
        "--scheduler-interval", type=float, default=5.0, help="--split: the loop's --interval"
    )
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
    with ExitStack() as stack:
        split = None
        if args.split:
            split = stack.enter_context(control_plane(args.api_workers, args.scheduler_interval))
        for db in dbs:
            for rate in rates:
                if db == "sqlite":
                    r = bench("SQLite", None, rate, args.duration, env, args.py_spy, split)
                elif pg:
                    with pg_schema(pg) as url:
                        r = bench("PostgreSQL", url, rate, args.duration, env, args.py_spy, split)
                else:
                    print("| PostgreSQL | skipped: SHOAL_TEST_PG_URL not set |", flush=True)
                    break
                rows.append(r)
                print(_row(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
