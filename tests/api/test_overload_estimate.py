"""Shedding on the expected wait: once requests are known to hold a slot for a while, a
newcomer that would wait past `max_wait_s` is refused on arrival (overloaded.expected_wait)
instead of after waiting. The middleware alone, on a fake clock, with an app whose
requests finish when the test says so."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from api.overload import LoadShedder


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Gate:
    """An ASGI app whose requests each wait for their own event, then answer 200."""

    def __init__(self) -> None:
        self.open: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.open.setdefault(scope["path"], asyncio.Event()).wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _request(app: Any, path: str) -> tuple[int, dict[str, Any] | None]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "POST", "headers": []}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, (json.loads(body) if status == 503 else None)


async def _until(condition: Any) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def test_a_request_that_would_wait_too_long_is_refused_on_arrival() -> None:
    async def run() -> None:
        clock, gate = Clock(), Gate()
        shed = LoadShedder(
            gate, max_in_flight=1, max_queued=100, max_wait_s=2.5, retry_after_s=1, clock=clock
        )
        # Teach it how long a request holds the slot: one that takes 10 s (fake time).
        first = asyncio.create_task(_request(shed, "/a"))
        await _until(lambda: "/a" in gate.open)
        clock.now += 10.0
        gate.open["/a"].set()
        assert (await first)[0] == 200
        assert shed.hold_s > 0
        # One in the slot, then waiters while a newcomer would still wait under 2.5 s.
        running = asyncio.create_task(_request(shed, "/b"))
        await _until(lambda: "/b" in gate.open)
        waiting: list[asyncio.Task[tuple[int, dict[str, Any] | None]]] = []
        while shed.expected_wait_s() <= 2.5:
            waiting.append(asyncio.create_task(_request(shed, f"/w{len(waiting)}")))
            await _until(lambda: len(shed._waiters) == len(waiting))
        assert 0 < len(waiting) < 100
        status, body = await _request(shed, "/late")
        assert status == 503 and body is not None
        assert body["detail"][0]["type"] == "overloaded.expected_wait"
        # The ones already waiting are not disturbed: each gets its turn.
        gate.open["/b"].set()
        for i in range(len(waiting)):
            gate.open.setdefault(f"/w{i}", asyncio.Event()).set()
        assert (await running)[0] == 200
        assert [(await w)[0] for w in waiting] == [200] * len(waiting)

    asyncio.run(run())


def test_without_a_measured_hold_nothing_is_refused_early() -> None:
    async def run() -> None:
        gate = Gate()
        shed = LoadShedder(gate, max_in_flight=1, max_queued=10, max_wait_s=60, retry_after_s=1)
        tasks = [asyncio.create_task(_request(shed, f"/{i}")) for i in range(5)]
        await _until(lambda: "/0" in gate.open and len(shed._waiters) == 4)
        for i in range(5):
            gate.open.setdefault(f"/{i}", asyncio.Event()).set()
        assert [(await t)[0] for t in tasks] == [200] * 5

    asyncio.run(run())
