"""Start-time estimates beside the loop (issue 29 part 1).

The loop hands every cycle's report to `Estimator.observe` (cheap: it keeps the
snapshot and wakes the estimator's thread). That thread, after each cycle, replays the
state forward (`core.forecast`) with runtimes from finished jobs
(`core.forecast.RuntimeModel`, re-read every `history_every_s`) and replaces the store's
estimates when one is due (`Estimator.tick`):
- at once when a pending job is one the last forecast did not cover, or an estimate has
  passed while its job still waits (issue 35: a new job had none for ~30 s, and a passed
  one stood until something else moved);
- at most every `interval_s` when only what else the forecast reads moved (what is
  pending, what runs and where).
The forecast itself runs in a process of its own (`subprocess`; the thread only waits for
it), so it never holds the loop's GIL: on a thread it slowed the cycles it overlapped
about twofold (docs/benchmarks.md, "Start-time estimates"). Its CPU is bounded too:
`max_steps` cycles a forecast, and the next one, whatever made it due, waits at least
`1 / cpu_share` times as long as the last took (a 4 s forecast at 1,000 nodes: the next in
80 s, 5% of a core). A new job that must wait for that gets a placeholder saying so
(`PLACEHOLDER`), so that it has an honest word within a cycle. That process ends with the
server, however the server ends (`_exit_with_parent`). Forecasts are spaced out on
real time (`clock`; a test gives the loop's virtual one); estimates, and whether one has
passed, are on the snapshots' clock.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
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


# The words of a new job's placeholder while the forecast is spaced out (`tick`).
PLACEHOLDER = "the forecast has not run since it was submitted; the next is due in about {} s"
# How long `run_forever` sleeps at most without a cycle's report: how late a forecast
# spaced out for its cost may come when no cycle runs.
IDLE_S = 1.0


class Estimator:
    def __init__(
        self,
        database: Database,
        config: EstimatorConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.config = config or EstimatorConfig()
        # What spaces forecasts out (their CPU share is a matter of real time); a test
        # gives the loop's virtual clock. Estimates are on the snapshots' clock.
        self._clock = clock
        self._latest: model.Snapshot | None = None
        self._wake = threading.Event()  # set by `observe`: a new snapshot to look at
        self._ticked: model.Snapshot | None = None  # the last snapshot `tick` looked at
        self._retry = float("inf")  # when `tick` may answer otherwise for that snapshot
        self._done: tuple[object, ...] | None = None
        self._at = -float("inf")  # when the last forecast ended (`clock`)
        self._covered: set[str] = set()  # the pending jobs of the last forecast
        self._held: set[str] = set()  # jobs given a placeholder since
        self._starts: dict[str, float] = {}  # estimated starts still ahead when made
        self._soonest = float("inf")  # the earliest of them
        self._placed: frozenset[str] = frozenset()  # the latest cycle's placed jobs
        self._model: forecast.RuntimeModel | None = None
        self._history_at = -float("inf")
        self._pool: ProcessPoolExecutor | None = None
        self._lifeline: Connection | None = None  # the writing end (`_exit_with_parent`)
        self.runs = 0  # forecasts made (for tests and metrics)
        self.last_seconds = 0.0  # CPU time of the last forecast

    def observe(self, report: object) -> None:
        """A loop observer: keep the cycle's snapshot and wake `run_forever` (nothing
        else; must be quick)."""
        snapshot = getattr(report, "snapshot", None)
        if snapshot is not None:
            result = getattr(report, "result", None)
            self._placed = frozenset(p.job_id for p in getattr(result, "places", ()))
            self._latest = snapshot
            self._wake.set()

    def run_once(self) -> bool:
        """Forecast the latest snapshot if it moved, or an estimate in it has passed,
        whenever the last forecast was; True when estimates were written."""
        snapshot = self._latest
        if snapshot is None:
            return False
        if _shape(snapshot) == self._done and not self._passed(snapshot):
            return False
        self._forecast(snapshot)
        return True

    def tick(self) -> str:
        """One round of `run_forever`, after a cycle: forecast the latest snapshot when
        due, else give a new job a placeholder. Returns why it forecast ("" if not)."""
        snapshot, now = self._latest, self._clock()
        if snapshot is None or (snapshot is self._ticked and now < self._retry):
            return ""  # nothing new to look at, and nothing waiting for time to pass
        self._ticked, self._retry = snapshot, float("inf")
        # A job placed by the cycle that took the snapshot does not wait: not news.
        covered, placed = self._covered, self._placed
        new = [j.id for j in snapshot.pending if j.id not in covered and j.id not in placed]
        if new:
            why, gap = "a job the last forecast did not cover", self.cost_s()
        elif self._passed(snapshot):
            why, gap = "an estimate passed while its job waits", self.cost_s()
        elif _shape(snapshot) != self._done:
            why, gap = "the state moved", self.pause_s()
        else:
            return ""
        if now < self._at + gap:
            self._retry = self._at + gap
            if held := [job_id for job_id in new if job_id not in self._held]:
                self._placehold(snapshot, held, self._retry - now)
            return ""
        self._forecast(snapshot)
        return why

    def _passed(self, snapshot: model.Snapshot) -> bool:
        """Whether an estimate made for a later time has passed while its job waits."""
        if self._soonest > snapshot.now:
            return False
        return any(
            self._starts.get(j.id, snapshot.now + 1) <= snapshot.now for j in snapshot.pending
        )

    def _forecast(self, snapshot: model.Snapshot) -> None:
        if self._model is None or self._clock() - self._history_at > self.config.history_every_s:
            with self.database.session() as session:
                self._model = forecast.RuntimeModel(estimates.finished_runtimes(session=session))
            self._history_at = self._clock()
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
        self._done = _shape(snapshot)
        self._at = self._clock()
        self._covered, self._held = set(got), set()
        # A start at the forecast's own time ("it fits now") is not watched: made again
        # at once it would say the same; a later one that passes is news.
        self._starts = {
            job_id: e.start_s
            for job_id, e in got.items()
            if e.start_s is not None and e.start_s > snapshot.now
        }
        self._soonest = min(self._starts.values(), default=float("inf"))
        self.runs += 1

    def _placehold(self, snapshot: model.Snapshot, job_ids: list[str], wait_s: float) -> None:
        """Say "not yet" for jobs the last forecast did not cover, while the next waits
        for the last one's cost (position 0: not known yet)."""
        at = datetime.fromtimestamp(snapshot.now, UTC)
        due = PLACEHOLDER.format(math.ceil(max(0.0, wait_s) + self.last_seconds))
        rows = [estimates.StartEstimate(job_id, None, 0, "", due, at) for job_id in job_ids]
        with self.database.session() as session:
            estimates.add_missing(session=session, estimates=rows)
        self._held.update(job_ids)

    def cost_s(self) -> float:
        """The least time between two forecasts: `1 / cpu_share` times the last one's CPU
        time, so that forecasts take at most `cpu_share` of a core."""
        return self.last_seconds / self.config.cpu_share

    def pause_s(self) -> float:
        """How long after the last forecast a state that only moved is forecast again:
        the interval, or longer after a costly one (`cost_s`)."""
        return max(self.config.interval_s, self.cost_s())

    def run_forever(self, stop: threading.Event) -> None:
        def ender() -> None:  # `stop` wakes it too: it ends at once, not up to IDLE_S on
            stop.wait()
            self._wake.set()

        threading.Thread(target=ender, name="estimator-stop", daemon=True).start()
        try:
            while not stop.is_set():
                self._wake.wait(IDLE_S)  # the next cycle's report
                self._wake.clear()
                if stop.is_set():
                    break
                try:
                    self.tick()
                except Exception:  # a database away: a later round tries again
                    log.exception("start-time estimate failed; retrying")
                    stop.wait(self.pause_s())
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._lifeline is not None:  # a forecast under way ends too
            self._lifeline.close()
            self._lifeline = None
