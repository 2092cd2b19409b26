"""The dashboard's recent history: GPUs allocated in all and per queue, over time.

An in-process ring buffer (Prometheus-style, no table): a daemon thread started with the
app samples the store every `interval_s` (default 30 s) and keeps the last `size` samples
(default 2880: 24 h). A sample is what `GET /cluster/summary` computes (`api.usage`): the
cluster's GPUs, those allocated, and what each queue's subtree holds. Bounded in memory
(a few hundred KB at 2880 samples of a few dozen queues), never written anywhere: a
restart begins a new history, and every API replica keeps its own (they read the same
store, so they agree from when each started). Long-term history is Prometheus's job
(`/metrics`, docs/dashboard.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from api import usage
from api.dashboard.charts import Series
from scheduler.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # unix seconds
    capacity: float  # GPUs in the inventory
    allocated: float  # GPUs held by running jobs (fractions summed)
    queues: dict[str, float]  # queue -> GPUs its subtree holds


def take(database: Database, at: float) -> Sample:
    with database.session() as session:
        u = usage.compute(session)
    by_model = u.by_model().values()
    return Sample(
        at=at,
        capacity=float(sum(total for total, _ in by_model)),
        allocated=round(sum(used for _, used in by_model), 6),
        queues={q: v for q, v in u.by_queue_tree().items() if v > 0},
    )


class History:
    def __init__(
        self,
        database: Database,
        *,
        interval_s: float = 30.0,
        size: int = 2880,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = database
        self.interval_s = interval_s
        self.clock = clock
        self._samples: deque[Sample] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, sample: Sample) -> None:
        with self._lock:
            if self._samples and sample.at < self._samples[-1].at:
                return  # out of order (two samplers raced): the later one stands
            self._samples.append(sample)

    def sample(self) -> Sample | None:
        """Take one sample now; None (logged) when the store cannot be read."""
        try:
            s = take(self.database, self.clock())
        except Exception:  # the database away: a gap in the chart, not a dead thread
            log.warning("history: sample failed", exc_info=True)
            return None
        self.record(s)
        return s

    def samples(self, *, fresh: bool = True) -> list[Sample]:
        """The samples, oldest first; with `fresh`, a new one is taken first when the
        newest is older than the interval (the page shows now, not 30 s ago)."""
        with self._lock:
            last = self._samples[-1].at if self._samples else None
        if fresh and (last is None or self.clock() - last >= self.interval_s):
            self.sample()
        with self._lock:
            return list(self._samples)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dashboard-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        # The first sample one interval after start (a page viewed sooner takes its own):
        # starting the app reads nothing of the store.
        while not self._stop.wait(self.interval_s):
            self.sample()


POINTS = 240  # drawn per line at most: the page polls every 2 s


@dataclass
class Chart:
    """What `_history.html` draws: step lines over [t0, t1], 0..top GPUs."""

    series: list[Series] = field(default_factory=list)
    t0: float = 0.0
    t1: float = 0.0
    top: float = 1.0
    samples: int = 0


def _thin(samples: list[Sample]) -> list[Sample]:
    if len(samples) <= POINTS:
        return samples
    step = len(samples) / POINTS
    kept = [samples[int(i * step)] for i in range(POINTS)]
    return [*kept[:-1], samples[-1]]


def _frame(samples: list[Sample]) -> Chart:
    if not samples:
        return Chart()
    return Chart(t0=samples[0].at, t1=samples[-1].at, samples=len(samples))


def cluster_chart(samples: list[Sample]) -> Chart:
    """GPUs allocated against the cluster's GPUs."""
    chart, thin = _frame(samples), _thin(samples)
    chart.series = [
        Series("GPUs in the cluster", "#9aa0a6", [(s.at, s.capacity) for s in thin]),
        Series("GPUs allocated", "#1a73e8", [(s.at, s.allocated) for s in thin]),
    ]
    chart.top = max([1.0, *(s.capacity for s in samples), *(s.allocated for s in samples)])
    return chart


def queue_chart(
    samples: list[Sample], names: list[str], colour: Callable[[str | None], str]
) -> Chart:
    """GPUs each of `names` (the queues the reader sees) held, its subtree included."""
    chart, thin = _frame(samples), _thin(samples)
    chart.series = [
        Series(q, colour(q), [(s.at, s.queues.get(q, 0.0)) for s in thin]) for q in names
    ]
    chart.top = max([1.0, *(s.queues.get(q, 0.0) for s in samples for q in names)])
    return chart
