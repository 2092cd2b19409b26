"""bench.api_load's driver, in a process of its own so that it does not share the server's
GIL: /healthz as fast as the server answers (closed loop, 32 connections), job submissions
as fast as it answers (closed loop, 32 clients) or offered at a fixed rate (open loop).
Prints one JSON object.

    python -m bench.api_drive healthz URL SECONDS
    python -m bench.api_drive capacity URL TOKEN SECONDS
    python -m bench.api_drive jobs URL TOKEN RATE SECONDS
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import uuid
from typing import Any

JOB_SECONDS = "5"  # jobs run `sleep` for a few seconds: no worker outlives the run for long


def _job(name: str) -> dict[str, object]:
    """One submission's body: half a GPU, a few seconds of `sleep`."""
    return {"name": name, "queue": "bench", "image": "img:1", "gpu": 0.5,
            "command": ["sleep", JOB_SECONDS]}  # fmt: skip


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
            body = _job(f"j{run}-{i}")
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
                body = _job(f"c{run}-{w}-{i}")
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


def main() -> None:
    what, url = sys.argv[1], sys.argv[2]
    if what == "healthz":
        out = asyncio.run(_healthz(url, float(sys.argv[3])))
    elif what == "capacity":
        out = asyncio.run(_closed_jobs(url, sys.argv[3], float(sys.argv[4])))
    else:
        token, rate, duration = sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
        out = asyncio.run(_open_loop(url, token, rate, duration))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
