"""Start-time estimates beside the loop (issue 29 part 1).

The loop hands every cycle's report to `Estimator.observe` (cheap: it keeps the
snapshot). A thread of its own, at most every `interval_s` and only when the snapshot
changed in what the forecast reads (what is pending, what runs and where), replays the
state forward (`core.forecast`) with runtimes from finished jobs
(`core.forecast.RuntimeModel`, re-read every `history_every_s`) and replaces the store's
estimates. It runs off the loop's thread, so a cycle never waits for it; the GIL still
shares the CPU, so its share is bounded: `max_steps` cycles a forecast, and the next one
waits at least `1 / cpu_share` times as long as the last took (a 4 s forecast at 1,000
nodes: the next in 80 s at most 5% of a core; docs/benchmarks.md, "Start-time
estimates").
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler import model
from scheduler.core import forecast
from scheduler.store import estimates
from scheduler.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EstimatorConfig:
    interval_s: float = 30.0
    max_steps: int = 200
    history_every_s: float = 300.0
    cpu_share: float = 0.05


def _shape(snapshot: model.Snapshot) -> tuple[object, ...]:
    """What the forecast reads that moves: pending jobs, running attempts and nodes."""
    return (
        tuple(sorted(j.id for j in snapshot.pending)),
        tuple(sorted((r.job.id, r.attempt, r.stopping) for r in snapshot.running)),
        tuple((n.name, n.gpu_count) for n in snapshot.nodes),
    )


class Estimator:
    def __init__(self, database: Database, config: EstimatorConfig | None = None) -> None:
        self.database = database
        self.config = config or EstimatorConfig()
        self._latest: model.Snapshot | None = None
        self._done: tuple[object, ...] | None = None
        self._model: forecast.RuntimeModel | None = None
        self._history_at = -float("inf")
        self.runs = 0  # forecasts made (for tests and metrics)
        self.last_seconds = 0.0  # CPU time of the last forecast

    def observe(self, report: object) -> None:
        """A loop observer: keep the cycle's snapshot (nothing else; must be quick)."""
        snapshot = getattr(report, "snapshot", None)
        if snapshot is not None:
            self._latest = snapshot

    def run_once(self) -> bool:
        """Forecast the latest snapshot if it changed; True when estimates were written."""
        snapshot = self._latest
        if snapshot is None:
            return False
        shape = _shape(snapshot)
        if shape == self._done:
            return False
        if self._model is None or time.monotonic() - self._history_at > self.config.history_every_s:
            with self.database.session() as session:
                self._model = forecast.RuntimeModel(estimates.finished_runtimes(session=session))
            self._history_at = time.monotonic()
        began = time.process_time()
        got = forecast.forecast(snapshot, self._model, max_steps=self.config.max_steps)
        self.last_seconds = time.process_time() - began
        at = datetime.fromtimestamp(snapshot.now, UTC)
        rows = [
            estimates.StartEstimate(
                job_id,
                None if e.start_s is None else datetime.fromtimestamp(e.start_s, UTC),
                e.position,
                e.basis,
                e.unknown,
                at,
            )
            for job_id, e in sorted(got.items())
        ]
        with self.database.session() as session:
            estimates.replace_all(session=session, estimates=rows)
        self._done = shape
        self.runs += 1
        return True

    def pause_s(self) -> float:
        """How long to wait before the next forecast: the interval, or longer after a
        costly one, so that forecasts take at most `cpu_share` of the time."""
        return max(self.config.interval_s, self.last_seconds / self.config.cpu_share)

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.wait(self.pause_s()):
            try:
                self.run_once()
            except Exception:  # a database away: the next round tries again
                log.exception("start-time estimate failed; retrying")
