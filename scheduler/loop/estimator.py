"""Start-time estimates beside the loop (issue 29 part 1).

The loop hands every cycle's report to `Estimator.observe` (cheap: it keeps the
snapshot). A thread of its own, at most every `interval_s` and only when the snapshot
changed in what the forecast reads (what is pending, what runs and where), replays the
state forward (`core.forecast`) with runtimes from finished jobs
(`core.forecast.RuntimeModel`, re-read every `history_every_s`) and replaces the store's
estimates. The forecast itself runs in a process of its own (`subprocess`; the thread
only waits for it), so it never holds the loop's GIL: on a thread it slowed the cycles it
overlapped about twofold (docs/benchmarks.md, "Start-time estimates"). Its CPU is bounded
too: `max_steps` cycles a forecast, and the next one waits at least `1 / cpu_share` times
as long as the last took (a 4 s forecast at 1,000 nodes: the next in 80 s, 5% of a core).
That process ends with the server, however the server ends (`_exit_with_parent`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import connection
from multiprocessing.connection import Connection

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
    subprocess: bool = True  # False: on the thread itself (tests; one process)


def _forecast(
    snapshot: model.Snapshot, runtime: forecast.RuntimeModel, max_steps: int
) -> tuple[dict[str, forecast.Estimate], float]:
    """The forecast and the CPU seconds it took (in whichever process runs it)."""
    began = time.process_time()
    got = forecast.forecast(snapshot, runtime, max_steps=max_steps)
    return got, time.process_time() - began


def _exit_with_parent(lifeline: Connection) -> None:
    """The forecast process's initializer: a thread that ends the process once the
    server's end of `lifeline` is closed. A SIGKILLed server cannot shut its pool down,
    and the pool's own pipes never tell (the process holds their writing ends too), so it
    would wait for work forever (issue 35: one was found 42 minutes on, parent 1). Only
    the server holds the writing end, so its end is EOF here, even one that came before
    this thread started; a pipe works wherever `spawn` does, unlike Linux's
    PR_SET_PDEATHSIG, which follows the thread that started the process, not the server."""

    def watch() -> None:
        connection.wait([lifeline])  # nothing is ever sent: readable means EOF
        os._exit(0)

    threading.Thread(target=watch, name="shoal-lifeline", daemon=True).start()


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
        self._pool: ProcessPoolExecutor | None = None
        self._lifeline: Connection | None = None  # the writing end (`_exit_with_parent`)
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
        args = (snapshot, self._model, self.config.max_steps)
        if self.config.subprocess:
            if self._pool is None:  # spawn: the serving process has threads, never fork it
                spawn = multiprocessing.get_context("spawn")
                reader, self._lifeline = spawn.Pipe(duplex=False)
                self._pool = ProcessPoolExecutor(
                    1, mp_context=spawn, initializer=_exit_with_parent, initargs=(reader,)
                )
            got, self.last_seconds = self._pool.submit(_forecast, *args).result()
        else:
            got, self.last_seconds = _forecast(*args)
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
        try:
            while not stop.wait(self.pause_s()):
                try:
                    self.run_once()
                except Exception:  # a database away: the next round tries again
                    log.exception("start-time estimate failed; retrying")
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._lifeline is not None:  # a forecast under way ends too
            self._lifeline.close()
            self._lifeline = None
