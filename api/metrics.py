"""Prometheus metrics on the app's own CollectorRegistry (so many apps in one process,
as in tests, never collide).

Names follow the anchors where they exist: KAI's queue_deserved_gpus and
queue_allocated_gpus, Kueue's pending_workloads, admitted_active_workloads,
admission_wait_time_seconds and preempted_workloads_total; all carry the `shoal_` prefix.

- per queue (read from the store at scrape time, parents with their subtree, see
  `api.queuestats`): deserved (guarantee), limit, fair share, allocated, borrowed, lent,
  pending workloads and GPUs, running workloads; GPUs per model and per GPU;
- per cycle (fed by the scheduler loop through `Metrics.observe_cycle` when the loop
  runs in this process, as in `shoal serve --role scheduler`; in plain `shoal serve` the
  API's process asks the loop's for them, `loop_series`): cycle and per-step duration
  histograms, admission wait per queue, preemptions per queue and reason (priority within
  a queue, or reclaim of a guarantee), invariant violations, leader status;
- the API's own request latency.

Scoping (`render`): an admin token or a `metrics` (scrape) token reads everything. A
member or viewer reads only the series labelled with a queue it may see, plus a few
cluster-wide series that `GET /nodes` and `/cluster/summary` show it anyway (GPUs per
model and per GPU, without owners). Everything else (other queues, job counts of the
whole cluster, loop internals) is left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import queuestats, usage
from api.auth import Principal, Role
from scheduler import model
from scheduler.store import jobs
from scheduler.store.db import Database

# Series without a queue label that a team's token may read: what /nodes shows it too.
TEAM_VISIBLE = frozenset(
    {
        "shoal_gpus_allocated",
        "shoal_gpus_idle",
        "shoal_gpus",
        "shoal_gpu_allocated_ratio",
        "shoal_gpus_draining",
    }
)
STEPS = ("lease", "observe", "reconcile", "snapshot", "schedule", "apply")
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def preemption_reason(message: str) -> str:
    """`reclaim` (a queue below its guarantee takes GPUs back) or `priority` (a job of
    higher priority in the same queue), from the core's Preempt reason."""
    return "reclaim" if message.startswith("reclaimed") else "priority"


class StoreCollector(Collector):
    """Queue and GPU figures, read from the store at every scrape."""

    def __init__(self, database: Database, config: Callable[[], model.Config | None]) -> None:
        self.database = database
        self.config = config

    def collect(self) -> Iterator[Metric]:
        with self.database.session() as session:
            u = usage.compute(session)
            phases = jobs.count_by_phase(session=session)
            stats = queuestats.compute(queuestats.snapshot(session, self.config()))
        yield from _queue_families(stats)
        yield from _gpu_families(u)
        by_phase = _family("shoal_jobs", "jobs in each phase", ["phase"])
        for phase, count in phases.items():
            by_phase.add_metric([phase], count)
        yield by_phase


def _family(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _queue_families(stats: list[queuestats.QueueStats]) -> Iterator[GaugeMetricFamily]:
    """Per queue (a parent with its subtree): Kueue's names where they exist."""
    family = _family
    deserved = family("shoal_queue_deserved_gpus", "guaranteed GPUs (quota)", ["queue"])
    limit = family("shoal_queue_limit_gpus", "GPU limit (absent: none)", ["queue"])
    fair = family("shoal_queue_fair_share_gpus", "fair share of the GPUs now", ["queue"])
    alloc = family(
        "shoal_queue_allocated_gpus", "GPUs held by the queue and its subtree", ["queue"]
    )
    # The older name, kept for existing dashboards and alerts.
    old_alloc = family(
        "shoal_queue_gpus_allocated", "GPUs held (same as queue_allocated_gpus)", ["queue"]
    )
    borrowed = family("shoal_queue_borrowed_gpus", "GPUs held above guarantee", ["queue"])
    lent = family("shoal_queue_lent_gpus", "unused guarantee that sibling queues borrow", ["queue"])
    pending = family("shoal_pending_workloads", "jobs waiting (pending, preempted)", ["queue"])
    pending_gpus = family("shoal_queue_pending_gpus", "GPUs that waiting jobs ask", ["queue"])
    running = family(
        "shoal_admitted_active_workloads", "jobs holding GPUs (scheduled, running)", ["queue"]
    )
    for s in stats:
        labels = [s.name]
        deserved.add_metric(labels, s.guaranteed)
        if s.limit is not None:
            limit.add_metric(labels, s.limit)
        fair.add_metric(labels, s.fair_share)
        alloc.add_metric(labels, s.allocated)
        old_alloc.add_metric(labels, s.allocated)
        borrowed.add_metric(labels, s.borrowed)
        lent.add_metric(labels, s.lent)
        pending.add_metric(labels, s.pending_jobs)
        pending_gpus.add_metric(labels, s.pending_gpus)
        running.add_metric(labels, s.running_jobs)
    yield from (deserved, limit, fair, alloc, old_alloc, borrowed, lent)
    yield from (pending, pending_gpus, running)


def _gpu_families(u: usage.Usage) -> Iterator[GaugeMetricFamily]:
    """Per GPU model, per GPU and per (GPU, queue): what is held, idle and draining."""
    total = _family("shoal_gpus", "GPUs in the inventory, per GPU model", ["model"])
    allocated = _family("shoal_gpus_allocated", "GPUs allocated, per GPU model", ["model"])
    idle = _family("shoal_gpus_idle", "GPUs idle, per GPU model", ["model"])
    for name, (t, used) in sorted(u.by_model().items()):
        total.add_metric([name], t)
        allocated.add_metric([name], used)
        idle.add_metric([name], t - used)
    draining = _family(
        "shoal_gpus_draining", "GPUs held by workers still stopping (allocated too)", []
    )
    draining.add_metric([], u.draining())
    ratio = _family(
        "shoal_gpu_allocated_ratio", "share of each GPU allocated", ["node", "gpu", "model"]
    )
    share = _family(
        "shoal_gpu_share_allocated_ratio",
        "share of each GPU held by each queue (join with DCGM for utilisation)",
        ["node", "gpu", "queue"],
    )
    for n in u.nodes:
        for i in range(n.gpu_count):
            ratio.add_metric([n.name, str(i), n.gpu_model], u.allocated(n.name, i))
            by_queue: dict[str, float] = {}
            for held in u.shares.get((n.name, i), ()):
                by_queue[held.queue] = by_queue.get(held.queue, 0.0) + held.fraction
            for q, f in sorted(by_queue.items()):
                share.add_metric([n.name, str(i), q], round(f, 6))
    yield from (total, allocated, idle, draining, ratio, share)


class Metrics:
    def __init__(
        self,
        database: Database,
        config: Callable[[], model.Config | None] | None = None,
        *,
        store_series: bool = True,  # queue and GPU gauges read from the store per scrape
        loop_series: Collector | None = None,
    ) -> None:
        """`loop_series`: the per-cycle families when the loop runs in another process
        (they are exposed from there, not from this process's unfed `loop_registry`)."""
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "shoal_api_request_seconds",
            "API request latency",
            ["method", "route", "status"],
            registry=self.registry,
        )
        # The loop's families apart, so that a process can expose them alone (the
        # scheduler's side of plain `shoal serve`, `scheduler.cli.loopshare`).
        self.loop_registry = CollectorRegistry()
        r = self.loop_registry
        self.cycle = Histogram(
            "shoal_scheduling_cycle_duration_seconds",
            "one scheduling cycle, end to end",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.step = Histogram(
            "shoal_scheduling_step_duration_seconds",
            "one step of a scheduling cycle",
            ["step"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.wait = Histogram(
            "shoal_admission_wait_time_seconds",
            "from submission to placement, per queue",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "shoal_preempted_workloads",
            "jobs preempted, per queue of the victim and reason (priority | reclaim)",
            ["queue", "reason"],
            registry=r,
        )
        self.violations = Counter(
            "shoal_invariant_violations",
            "invariant violations found by the cycle's check, per kind",
            ["kind"],
            registry=r,
        )
        self.violations_now = Gauge(
            "shoal_invariant_violations_current",
            "violations found by the last cycle, per kind",
            ["kind"],
            registry=r,
        )
        self.cycles = Counter("shoal_scheduling_cycles", "scheduling cycles run", registry=r)
        self.reconciled = Histogram(
            "shoal_cycle_jobs_reconciled",
            "live jobs a cycle reconciled (the scheduler cache skips the settled ones)",
            buckets=(0, 1, 10, 100, 1_000, 10_000, 100_000),
            registry=r,
        )
        self.full_passes = Counter(
            "shoal_cache_full_passes", "cycles that read and reconciled everything", registry=r
        )
        self.drift = Counter(
            "shoal_cache_drift",
            "what a full pass found the scheduler cache had wrong (should stay 0)",
            registry=r,
        )
        self.leader = Gauge(
            "shoal_leader", "1 while this replica schedules (holds the lease)", registry=r
        )
        self._leading: Callable[[], bool] | None = None
        self.leader.set_function(lambda: float(bool(self._leading and self._leading())))
        self._kinds: set[str] = set()
        self.registry.register(loop_series or self.loop_registry)
        if store_series:  # off in `--role scheduler`: the API's replicas report them
            self.registry.register(StoreCollector(database, config or (lambda: None)))

    def follow_leader(self, leading: Callable[[], bool]) -> None:
        self._leading = leading

    def observe_cycle(self, report: object) -> None:
        """Record one completed cycle (a `scheduler.loop.service.CycleReport`)."""
        self.cycles.inc()
        self.cycle.observe(float(getattr(report, "seconds", 0.0)))
        for step, seconds in getattr(report, "steps", {}).items():
            self.step.labels(step).observe(seconds)
        cache = getattr(report, "cache", None)
        if cache is not None:
            self.reconciled.observe(cache.looked_at)
            self.full_passes.inc(int(cache.full))
            self.drift.inc(len(cache.drift))
        result: model.CycleResult | None = getattr(report, "result", None)
        snap: model.Snapshot | None = getattr(report, "snapshot", None)
        if result is None:
            return
        now = float(getattr(report, "now", time.time()))
        pending = {j.id: j for j in snap.pending} if snap else {}
        running = {r.job.id: r.job for r in snap.running} if snap else {}
        for place in result.places:
            job = pending.get(place.job_id)
            if job is not None and job.submitted_at > 0:
                self.wait.labels(job.queue).observe(max(0.0, now - job.submitted_at))
        for p in result.preempts:
            victim = running.get(p.job_id)
            queue = victim.queue if victim is not None else ""
            self.preemptions.labels(queue, preemption_reason(p.reason)).inc()
        counts: dict[str, int] = {}
        for v in result.violations:
            counts[v.kind] = counts.get(v.kind, 0) + 1
            self.violations.labels(v.kind).inc()
        for kind in self._kinds | set(counts):
            self.violations_now.labels(kind).set(counts.get(kind, 0))
        self._kinds |= set(counts)


def unscoped(principal: Principal) -> bool:
    """Admins and scrape tokens read every queue's series."""
    return principal.role in (Role.ADMIN, Role.METRICS) or principal.visible_queues is None


def render(metrics: Metrics, principal: Principal) -> bytes:
    """The exposition text, filtered to what `principal` may see."""
    if unscoped(principal):
        return generate_latest(metrics.registry)
    return generate_latest(_Scoped(metrics.registry, principal.visible_queues or frozenset()))


class _Scoped:
    """A registry view with only a team's queues (what `generate_latest` needs: collect)."""

    def __init__(self, registry: CollectorRegistry, queues: frozenset[str]) -> None:
        self.registry, self.queues = registry, queues

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = family.samples
            if family.name in TEAM_VISIBLE:
                kept = samples
            else:
                kept = [s for s in samples if s.labels.get("queue") in self.queues]
            if not kept:
                continue
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = kept
            yield out


class LatencyMiddleware:
    """Times each HTTP request by its route template (not the raw path: bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.metrics.latency.labels(scope["method"], template, str(status)).observe(
                time.perf_counter() - start
            )
