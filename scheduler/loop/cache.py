"""The scheduler cache: what the loop keeps of the store and the cluster from one cycle
to the next, so that a cycle's own work grows with what changed rather than with what
exists (as kube-scheduler's cache and Kueue's `pkg/cache` do).

- `live`: the live jobs as last read; a row is read again only when its version moved
  (`store.live.LiveCache`; every write of a job row bumps it).
- `settled`: per job, what reconcile saw when it found nothing to do (the row's version,
  the workers of its attempt) and until when time alone keeps it so
  (`lifecycle.quiet_until`). Such a job is not reconciled again until one of the three
  moves. Backends hand back the same status objects while a worker does not change
  (the pod index, the sim), so comparing workers is mostly comparing identities.
- `attempts`: the attempts `phases.orphans` found held by their job, with what it saw;
  only the others, and those whose workers or job moved, are looked at again.
- `held`: each running job's core entry, made once per row version.

A full pass (every row read again, every job reconciled, every attempt looked at) runs
at start, when this replica becomes the leader, and every `full_every` cycles. It
compares what the cache held with what it finds and reports drift (a row whose content
changed under an unchanged version; a settled job that had something to do) in the log
and the cycle's report; the cache then goes on from what the full pass found.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler import model
from scheduler.backends.base import WorkerStatus
from scheduler.loop import lifecycle
from scheduler.store.live import LIVE, LiveCache, LiveJob, Unreadable
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)

AttemptKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CachePass:
    """One cycle's use of the cache: a full pass or not, the live jobs reconciled, and
    what a full pass found the cache had wrong (empty: nothing)."""

    full: bool = False
    looked_at: int = 0
    drift: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Settled:
    version: int
    workers: Sequence[WorkerStatus]
    until: float


class SchedulerCache:
    """The loop's cache (see the module doc). One per loop: a loop's cycles are its only
    users, so there is no locking."""

    def __init__(self, full_every: int) -> None:
        self.full_every = full_every
        self.live = LiveCache()
        self.settled: dict[str, _Settled] = {}
        self.attempts: dict[AttemptKey, tuple[Sequence[WorkerStatus], LiveJob | None]] = {}
        self.held: dict[str, tuple[LiveJob, model.RunningJob | None]] = {}
        self.full = True  # this cycle is a full pass (the first one is)
        self.drift: list[str] = []  # what this cycle's full pass found the cache had wrong
        self.looked_at = 0  # live jobs reconciled this cycle
        self._cycles = 0

    def begin(self, *, leading_again: bool) -> None:
        """Start a cycle: a full pass at start, on becoming the leader, and periodically."""
        self.full = leading_again or self._cycles % self.full_every == 0
        self._cycles += 1
        self.drift, self.looked_at = [], 0

    def read(self, db: LiveStore, unreadable: list[Unreadable]) -> list[LiveJob]:
        """The live jobs: the rows whose version moved read again, or all in a full pass."""
        if not self.full:
            return db.live_jobs(unreadable=unreadable, cache=self.live)
        before, self.live = self.live.jobs, self.live.emptied()
        live = db.live_jobs(unreadable=unreadable, cache=self.live)
        for lj in live:
            old = before.get(lj.id)
            if old is not None and old.version == lj.version and old != lj:
                self._drifted(f"job {lj.id}: row changed at version {lj.version}")
        return live

    def quiet(self, lj: LiveJob, workers: Sequence[WorkerStatus], now: float) -> bool:
        """Whether reconciling `lj` would do nothing: settled, and neither its row nor its
        workers moved, and its quiet time has not come."""
        s = self.settled.get(lj.id)
        return s is not None and s.version == lj.version and now < s.until and s.workers == workers

    def reconciled(
        self,
        lj: LiveJob,
        workers: Sequence[WorkerStatus],
        now: float,
        *,
        was_quiet: bool,
        acted: bool,
    ) -> None:
        """Record what reconciling `lj` found; in a full pass, a job the cache would have
        skipped (`was_quiet`) that had something to do (`acted`) is drift."""
        self.looked_at += 1
        if was_quiet and acted:
            self._drifted(f"job {lj.id}: settled, but reconcile had something to do")
        until = lifecycle.quiet_until(lj, workers, now)
        if not acted and until > now:
            self.settled[lj.id] = _Settled(lj.version, workers, until)
        else:
            self.settled.pop(lj.id, None)

    def unsettled_attempts(
        self,
        attempts: Mapping[AttemptKey, list[WorkerStatus]],
        by_id: Mapping[str, LiveJob],
    ) -> dict[AttemptKey, list[WorkerStatus]]:
        """The attempts `phases.orphans` must look at: all in a full pass, else those
        not found held before, or whose workers or job moved since."""
        if self.full:
            return dict(attempts)
        seen = self.attempts
        return {k: ws for k, ws in attempts.items() if seen.get(k) != (ws, by_id.get(k[0]))}

    def attempts_held(
        self,
        looked: Mapping[AttemptKey, list[WorkerStatus]],
        attempts: Mapping[AttemptKey, list[WorkerStatus]],
        by_id: Mapping[str, LiveJob],
        draining: Sequence[AttemptKey],
    ) -> None:
        """Remember the attempts looked at that are not draining (held by their job, or
        ended); forget those draining and those no longer reported."""
        seen = {} if self.full else self.attempts
        out = set(draining)
        for k in out:
            seen.pop(k, None)
        for k, ws in looked.items():
            if k not in out:
                seen[k] = (ws, by_id.get(k[0]))
        if len(seen) > len(attempts):
            seen = {k: v for k, v in seen.items() if k in attempts}
        self.attempts = seen

    def running(self, live: Sequence[LiveJob]) -> list[model.RunningJob]:
        """The core's entry of each job that holds GPUs, made once per row version."""
        held, out = self.held, []
        fresh: dict[str, tuple[LiveJob, model.RunningJob | None]] = {}
        for lj in live:
            hit = held.get(lj.id)
            entry = hit if hit is not None and hit[0] is lj else (lj, lj.running())
            fresh[lj.id] = entry
            if entry[1] is not None:
                out.append(entry[1])
        self.held = fresh
        return out

    def wrote(self, jobs: Iterable[LiveJob]) -> None:
        """This loop wrote these jobs (committed), each as its row now reads: the cached
        job becomes it instead of being read back. One given back at the version it was
        cached at (a write the store could not place at a version) is read again, as the
        version moved. A settled job stays settled through a write no `LiveJob` field
        reads (a pending reason)."""
        cached = self.live.jobs
        for lj in jobs:
            old = cached.get(lj.id)
            if old is None or lj.version <= old.version:
                continue
            cached[lj.id] = lj
            s = self.settled.get(lj.id)
            if s is None or s.version != old.version:
                continue
            if dataclasses.replace(old, version=lj.version) == lj:
                self.settled[lj.id] = dataclasses.replace(s, version=lj.version)

    def live_now(self, live: Sequence[LiveJob]) -> list[LiveJob]:
        """`live` (the jobs read this cycle) as the cache now holds them, those written
        out of the live phases left out."""
        jobs = self.live.jobs
        out = [jobs.get(lj.id, lj) for lj in live]
        return [lj for lj in out if lj.phase in LIVE]

    def summary(self) -> CachePass:
        return CachePass(self.full, self.looked_at, tuple(self.drift))

    def forget(self, live: Mapping[str, LiveJob]) -> None:
        """Drop what the cache keeps of jobs no longer live."""
        if len(self.settled) > len(live):
            self.settled = {k: v for k, v in self.settled.items() if k in live}

    def _drifted(self, what: str) -> None:
        log.warning("scheduler cache drift: %s", what)
        self.drift.append(what)
