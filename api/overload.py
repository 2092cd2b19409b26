"""Load shedding: a bounded number of requests run at once, a bounded number wait (each
for a bounded time), and the rest are answered at once with 503 and `Retry-After`.

Without it a server past its capacity queues requests without bound (in the accept
backlog, the event loop and the thread pool) and every client waits minutes. A shed
request is refused before any route runs, so nothing of it is stored; a client retries
after `Retry-After` seconds. Probes (/healthz, /readyz) are never shed, so an overloaded
replica is not restarted for being busy. Settings: `api.settings.Settings` (docs/api.md).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ErrorItem, response

EXEMPT_PATHS = frozenset({"/healthz", "/readyz"})
HOLD_WEIGHT = 0.05  # of each request in the moving average of slot holding times
DRAIN_BYTES = 64 * 1024  # a refused request's body read up to this (a job spec is ~1 KiB)


class LoadShedder:
    """ASGI middleware: at most `max_in_flight` requests inside the app; up to
    `max_queued` more wait, first come first served, at most `max_wait_s` each; past
    either bound a request gets 503 with `Retry-After: retry_after_s`. 0 in
    `max_in_flight` turns shedding off."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_in_flight: int,
        max_queued: int,
        max_wait_s: float,
        retry_after_s: int,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self._clock = clock
        # How long a request holds its slot (moving average); with the queue's length it
        # says how long a newcomer would wait, so one that would wait past `max_wait_s` is
        # refused on arrival, not after waiting max_wait_s for nothing (at 200/s on a
        # saturated server, shed answers took 0.76-1.0 s at p99: docs/benchmarks.md).
        self.hold_s = 0.0
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.max_wait_s = max_wait_s
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        # Waiters get their slot handed over on release (in_flight stays the same), so a
        # newcomer can never overtake the queue.
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.shed = Counter(
            "shoal_api_shed_requests",
            "requests refused with 503 under overload, by why "
            "(queue_full | expected_wait | waited_too_long)",
            ["why"],
            registry=registry,
        )
        running = Gauge(
            "shoal_api_requests_in_flight", "requests inside the app", registry=registry
        )
        running.set_function(lambda: self.in_flight)
        waiting = Gauge(
            "shoal_api_requests_waiting", "requests waiting for a slot", registry=registry
        )
        waiting.set_function(lambda: len(self._waiters))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_in_flight <= 0 or scope.get("path") in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        why = await self._acquire()
        if why is not None:
            self.shed.labels(why).inc()
            await self._refuse(why, scope, receive, send)
            return
        released = False
        start = self._clock()

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.hold_s += HOLD_WEIGHT * (self._clock() - start - self.hold_s)
                self._release()

        async def send_then_release(message: Message) -> None:
            await send(message)
            # Free the slot with the last byte, before the client can send its next request.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            release()

    async def _acquire(self) -> str | None:
        """None once the request holds a slot, else why it is shed."""
        if self.in_flight < self.max_in_flight and not self._waiters:
            self.in_flight += 1
            return None
        if len(self._waiters) >= self.max_queued:
            return "queue_full"
        if self.expected_wait_s() > self.max_wait_s:
            return "expected_wait"
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.max_wait_s)
            return None
        except TimeoutError:
            if waiter.done():  # the slot was handed over just as the wait ran out
                return None
            self._waiters.remove(waiter)
            waiter.cancel()
            return "waited_too_long"
        except BaseException:  # the client went away while waiting
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                waiter.cancel()
            elif waiter.done() and not waiter.cancelled():
                self._release()  # it had been handed a slot: pass it on
            raise

    def expected_wait_s(self) -> float:
        """How long a request arriving now would wait for a slot: the ones queued before
        it, and itself, each take a slot for about `hold_s`, `max_in_flight` at a time."""
        return (len(self._waiters) + 1) * self.hold_s / self.max_in_flight

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: in_flight is unchanged
                return
        self.in_flight -= 1

    async def _refuse(self, why: str, scope: Scope, receive: Receive, send: Send) -> None:
        # Read a small body first: answering before it is read makes the server close the
        # keep-alive connection, and the client's reconnect costs more than the refusal.
        seen = 0
        more = True
        while more and seen <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            seen += len(message.get("body", b""))
            more = bool(message.get("more_body", False))
        msg = (
            f"server overloaded ({self.max_in_flight} requests running, "
            f"{len(self._waiters)} waiting); retry after {self.retry_after_s} s"
        )
        item = ErrorItem(loc=[], msg=msg, type=f"overloaded.{why}")
        headers = {"Retry-After": str(self.retry_after_s)}
        await response(503, [item], headers)(scope, receive, send)
