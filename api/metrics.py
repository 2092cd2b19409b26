"""Prometheus metrics on the app's own CollectorRegistry (so many apps in one process,
as in tests, never collide): request latency, plus GPU and job gauges read from the
store at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import usage
from scheduler.store import jobs
from scheduler.store.db import Database


class StoreCollector(Collector):
    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[Metric]:
        with self.database.session() as session:
            u = usage.compute(session)
            phases = jobs.count_by_phase(session=session)
        per_queue = GaugeMetricFamily(
            "shoal_queue_gpus_allocated", "GPUs held by each queue's jobs", labels=["queue"]
        )
        for queue, amount in sorted(u.by_queue().items()):
            per_queue.add_metric([queue], amount)
        allocated = GaugeMetricFamily(
            "shoal_gpus_allocated", "GPUs allocated, per GPU model", labels=["model"]
        )
        idle = GaugeMetricFamily("shoal_gpus_idle", "GPUs idle, per GPU model", labels=["model"])
        for model, (total, used) in sorted(u.by_model().items()):
            allocated.add_metric([model], used)
            idle.add_metric([model], total - used)
        by_phase = GaugeMetricFamily("shoal_jobs", "jobs in each phase", labels=["phase"])
        for phase, n in phases.items():
            by_phase.add_metric([phase], n)
        yield from (per_queue, allocated, idle, by_phase)


class Metrics:
    def __init__(self, database: Database) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "shoal_api_request_seconds",
            "API request latency",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.registry.register(StoreCollector(database))


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
