"""The queues and the inventory that the feasibility checks (`scheduler.feasibility`)
test a submission against, read from the store at most once per `ttl_s` instead of
twice per request.

Profiled under load (docs/benchmarks.md, "REST API throughput"), reading every queue and
every node on each submission was a fifth of the route's time. A cached snapshot can be
stale in two ways, and neither may change an answer:

- it refuses what fresh data would admit (a queue or node added since): every refusal is
  checked again on data read now, and only a refusal that stands is returned;
- it admits what fresh data would refuse (a queue deleted, a limit lowered since): the
  store refuses an unknown queue itself, and a job over a new limit waits with a pending
  reason, as it would had it been submitted a moment before the change.

Writes through this process (`invalidate`) drop the snapshot at once; writes by another
replica are seen within `ttl_s`. That holds for the queues' admins' limits (`allowed`)
too: a list tightened on another replica (or by a Queue object) binds here within
`ttl_s`; the chart's limits are fixed for the process's life.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler import feasibility
from scheduler.model import Node, Queue
from scheduler.spec import JobSpec
from scheduler.spec.allowed import Allowances
from scheduler.store import queues
from scheduler.store.cluster import load_capacity, load_queues
from scheduler.store.db import Session

DEFAULT_TTL_S = 1.0


_Data = tuple[tuple[Queue, ...], tuple[Node, ...], dict[str, Allowances]]


class FeasibilitySnapshot:
    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        chart_limits: Allowances | None = None,
        jobs_namespace: str = "shoal-jobs",
    ) -> None:
        self.ttl_s = ttl_s
        self.chart_limits = chart_limits  # the chart's admission.allowed
        self.jobs_namespace = jobs_namespace  # where a job naming no namespace runs
        self._clock = clock
        self._lock = threading.Lock()
        self._data: tuple[float, _Data] | None = None
        self._generation = 0  # bumped by invalidate: a read begun before it is not kept

    def invalidate(self) -> None:
        with self._lock:
            self._data = None
            self._generation += 1

    def _load(self, session: Session) -> _Data:
        generation = self._generation
        data = (
            load_queues(session=session),
            load_capacity(session=session),
            queues.load_allowed(session=session),
        )
        with self._lock:
            if generation == self._generation:
                self._data = (self._clock(), data)
        return data

    def _cached(self, session: Session) -> _Data:
        data = self._data
        if data is not None and self._clock() - data[0] < self.ttl_s:
            return data[1]
        return self._load(session)

    def check_job(
        self, session: Session, spec: JobSpec, *, may_submit: Callable[[str], bool]
    ) -> list[feasibility.Problem]:
        """`feasibility.check_job` against the queues the caller may submit to (the others
        are reported as unknown: no existence leak, their limits unread), the nodes as if
        empty and the admins' limits."""

        def check(data: _Data) -> list[feasibility.Problem]:
            all_queues, nodes, limits = data
            known: Mapping[str, Queue] = {q.name: q for q in all_queues if may_submit(q.name)}
            mine = {name: a for name, a in limits.items() if name in known}
            return feasibility.check_job(
                spec,
                queues=known,
                nodes=nodes,
                limits=mine,
                chart_limits=self.chart_limits,
                jobs_namespace=self.jobs_namespace,
            )

        problems = check(self._cached(session))
        if problems:  # never refuse on stale data
            problems = check(self._load(session))
        return problems


class InvalidateOnQueueWrite:
    """ASGI middleware: a queue created, changed or deleted through this API drops the
    snapshot, so this replica's next submission sees it at once."""

    def __init__(self, app: ASGIApp, snapshot: FeasibilitySnapshot, prefix: str) -> None:
        self.app, self.snapshot, self.prefix = app, snapshot, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") in ("GET", "HEAD", "OPTIONS")
            or not str(scope.get("path", "")).startswith(self.prefix)
        ):
            await self.app(scope, receive, send)
            return

        async def invalidate_then_send(message: Message) -> None:
            # Before the client hears of the write, so its next submission sees it.
            if message["type"] == "http.response.start":
                self.snapshot.invalidate()
            await send(message)

        try:
            await self.app(scope, receive, invalidate_then_send)
        finally:
            self.snapshot.invalidate()
