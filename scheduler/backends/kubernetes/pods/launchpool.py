"""Launches off the loop's thread (kube-scheduler's assume, then bind asynchronously).

The loop records a placement in the store and hands the launch here: from then on the
placement's GPUs are taken (the store holds them; a DRA claim's devices are assumed in
`DraClaims` as it is chosen), and the launch's writes (Service, claim, claim status,
pod, Binding, Events) run on a bounded pool, launches of different jobs in parallel.
Until the loop has taken a launch's outcome (`settled`) its workers count as pending
(`pending`), so the loop neither calls them missing nor finishes the launch again. A
launch that failed is handed back with its error and the loop treats it as it treats a
launch that raised: forget the placement and place the job again (refused), or finish
it later (transient). `guard` is the loop's lease fence, asked before the writes.

A stop of a job first cancels its launch (`cancel`): one still queued never starts, one
under way is waited for, so no pod is made after the stop has looked for them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from scheduler.backends import base

log = logging.getLogger(__name__)
Key = tuple[str, int]  # (job id, attempt)
CANCEL_WAIT_S = 60.0  # the longest a stop waits for a launch under way


@dataclass
class _Flight:
    request: base.LaunchRequest
    future: Future[None] | None = None
    error: Exception | None = None
    done: bool = False
    cancelled: threading.Event = field(default_factory=threading.Event)


class LaunchPool:
    def __init__(
        self,
        launch: Callable[[base.LaunchRequest], None],
        threads: int,
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        self._launch, self._on_done = launch, on_done
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="shoal-launch")
        self._lock = threading.Lock()
        self._flights: dict[Key, _Flight] = {}

    def start(self, request: base.LaunchRequest, guard: Callable[[str], None]) -> None:
        """Queue the launch, unless this attempt's is queued, under way or not yet
        settled (the loop finishes an unfinished launch each cycle: one is enough)."""
        key = (request.job_id, request.attempt)
        with self._lock:
            if key in self._flights:
                return
            flight = self._flights[key] = _Flight(request)
        flight.future = self._pool.submit(self._run, flight, guard)

    def _run(self, flight: _Flight, guard: Callable[[str], None]) -> None:
        try:
            if not flight.cancelled.is_set():
                guard("launch")
                self._launch(flight.request)
        except Exception as exc:  # the loop's to handle, as a launch that raised
            flight.error = exc
        finally:
            flight.done = True
        self._on_done()

    def settled(self) -> list[tuple[base.LaunchRequest, Exception | None]]:
        """Each launch that finished since the last call, once, with its error (None:
        done); cancelled ones are dropped (their job was stopped)."""
        with self._lock:
            out = [k for k, f in self._flights.items() if f.done]
            flights = [self._flights.pop(k) for k in out]
        return [(f.request, f.error) for f in flights if not f.cancelled.is_set()]

    def pending(self) -> list[base.LaunchRequest]:
        """Launches not settled yet: their workers count as pending."""
        with self._lock:
            return [f.request for f in self._flights.values() if not f.cancelled.is_set()]

    def cancel(self, job_id: str) -> None:
        """Before `job_id` is stopped: drop its queued launch, wait for one under way."""
        with self._lock:
            flights = [f for k, f in self._flights.items() if k[0] == job_id]
        running = []
        for f in flights:
            f.cancelled.set()
            if f.future is not None and not f.future.cancel():
                running.append(f.future)
            elif f.future is not None:  # never ran: nothing of it to settle
                f.done = True
        if running and wait(running, CANCEL_WAIT_S).not_done:
            log.warning("job %s's launch is still under way after %.0fs", job_id, CANCEL_WAIT_S)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
