"""The scheduler loop: the only writer of placements. `Loop.run_once()` is one cycle;
`Loop.run_forever()` repeats it on a timer and whenever `wake()` is called (a new
submission, a worker changing state).

One cycle, in order:
  1. lease     - hold the single-scheduler lease, else do nothing this time
  2. observe   - nodes and workers from the backend; live jobs from the store
  3. reconcile - phases follow workers; re-launch a recorded but unlaunched attempt;
                 stop workers whose job no longer holds them (see `reconcile`)
  4. snapshot  - queues, running (stopping workers keep their GPUs), pending, `now`;
                 plus a `ForeignWorkloads` backend's foreign pods (bound: running)
  5. schedule  - `scheduler.core.cycle.schedule(snapshot)`, pure
  6. apply     - preempt (store, then stop), place (record, then launch), reasons
The store is written before the backend is touched at every step, so a crash at any
point leaves a state the next cycle (in this or a restarted process) completes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from scheduler.backends import base
from scheduler.core import cycle, model
from scheduler.loop import apply, reconcile
from scheduler.loop.backoff import Backoff
from scheduler.loop.clock import Clock, WallClock, as_datetime
from scheduler.loop.workerenv import WorkerEnv
from scheduler.spec import Phase
from scheduler.store import cycle as store
from scheduler.store import retention
from scheduler.store.db import Database

log = logging.getLogger(__name__)

ScheduleFn = Callable[[model.Snapshot], model.CycleResult]


@dataclass(frozen=True)
class LoopConfig:
    holder: str = "shoal"
    interval_s: float = 2.0
    lease_ttl_s: float = 15.0
    core: model.Config = field(default_factory=model.Config)
    # Given to every worker (SHOAL_API_URL, SHOAL_API_TOKEN): one mapping, or per job
    # (`workerenv.ScopedWorkerEnv`: a token good for that job's progress only).
    worker_env: WorkerEnv = field(default_factory=dict)
    # Replicas elected through a Kubernetes Lease: cycle only while this one leads (the
    # store lease above stays the inner guard). None: always.
    is_leader: Callable[[], bool] | None = None
    # Finished jobs older than this (seconds since they finished) are deleted with their
    # events (`store.retention.purge_finished`); None keeps them forever.
    job_retention_s: float | None = None


@dataclass
class CycleReport:
    now: float
    result: model.CycleResult
    reconciled: reconcile.Reconciled
    applied: apply.Applied
    seconds: float
    # Seconds spent in each step of the cycle (lease, observe, reconcile, snapshot,
    # schedule, apply), and the snapshot the core was given: for metrics.
    steps: dict[str, float] = field(default_factory=dict)
    snapshot: model.Snapshot | None = None


class Loop:
    def __init__(
        self,
        database: Database,
        backend: base.ClusterBackend,
        *,
        clock: Clock | None = None,
        config: LoopConfig | None = None,
        schedule: ScheduleFn | None = None,
    ) -> None:
        self.database = database
        self.backend = backend
        self.clock = clock or WallClock()
        self.config = config or LoopConfig()
        self.schedule = schedule or cycle.schedule
        self._wake = threading.Event()
        self._inventory: tuple[model.Node, ...] | None = None
        self._reasons: dict[str, model.PendingReason] = {}
        # Per-job backoff after a refused or failed launch/bind (scheduler.loop.backoff).
        self.backoff = Backoff()
        # A failed attempt's retry waits 2 s, 4 s, 8 s... (at most 5 min): BackoffRetry.
        self.retries = Backoff(base_s=2.0, max_s=300.0)
        self.cycles = 0
        # Whether the last cycle held the lease (and, when elected, the Lease): leader status.
        self.leading = False
        # Called with every completed cycle's report (the API's metrics); must not raise.
        self.observers: list[Callable[[CycleReport], None]] = []

    def wake(self) -> None:
        self._wake.set()

    def run_forever(self, stop: threading.Event) -> None:
        """Cycle until `stop` is set; errors (a database restart) are logged, not fatal."""
        while not stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                stop.wait(1.0)
            self._wake.wait(self.config.interval_s)
        with self.database.session() as session:
            store.release_lease(session=session, holder=self.config.holder)

    def run_once(self) -> CycleReport | None:
        t0 = time.perf_counter()
        steps: dict[str, float] = {}
        last = [t0]

        def mark(step: str) -> None:
            t = time.perf_counter()
            steps[step] = t - last[0]
            last[0] = t

        now = self.clock.now()
        if self.config.is_leader is not None and not self.config.is_leader():
            self.leading = False
            return None
        with self.database.session() as session:
            # 1. lease
            lease = store.acquire_lease(
                session=session,
                holder=self.config.holder,
                ttl_s=self.config.lease_ttl_s,
                now=as_datetime(now),
            )
            self.leading = lease
            if not lease:
                return None
            mark("lease")
            # 2. observe
            nodes = tuple(self.backend.nodes())
            if nodes != self._inventory:
                store.save_inventory(session=session, nodes=nodes, now=as_datetime(now))
                self._inventory = nodes
            foreign = self.backend if isinstance(self.backend, base.ForeignWorkloads) else None
            f_running = tuple(foreign.foreign_running()) if foreign else ()
            f_pending = tuple(foreign.foreign_requests()) if foreign else ()
            adopted = {r.job.id for r in f_running}
            # Adopted foreign pods are not the store's jobs: never orphans.
            attempts = reconcile.by_attempt(
                [w for w in self.backend.workers() if w.job_id not in adopted]
            )
            live = store.live_jobs(session=session)
            mark("observe")
            # 3. reconcile
            done = reconcile.Reconciled()
            for lj in live:
                workers = attempts.get((lj.id, lj.attempt), []) if lj.attempt else []
                reconcile.job(
                    session,
                    self.backend,
                    lj,
                    workers,
                    now=now,
                    extra_env=self.config.worker_env,
                    done=done,
                    backoff=self.backoff,
                    retries=self.retries,
                )
            if done.changed():
                live = store.live_jobs(session=session)
            by_id = {lj.id: lj for lj in live}
            keep = set(by_id) | {r.id for r in f_pending}
            self._reasons = {k: v for k, v in self._reasons.items() if k in keep}
            self.backoff.keep_only(set(by_id) | {r.id for r in f_pending})
            self.retries.keep_only(set(by_id))
            draining = reconcile.orphans(self.backend, by_id, attempts, done, session)
            mark("reconcile")
            # 4. snapshot
            snapshot = self._snapshot(
                session, now, nodes, live, attempts, draining, f_running, f_pending
            )
            mark("snapshot")
            # 5. schedule
            result = self.schedule(snapshot)
            mark("schedule")
            # 6. apply
            applied = apply.apply(
                session,
                self.backend,
                result,
                by_id,
                now=now,
                worker_env=self.config.worker_env,
                reasons=self._reasons,
                foreign=foreign,
                foreign_ids={r.id for r in snapshot.pending} - by_id.keys(),
                backoff=self.backoff,
            )
        self._forget_finished(attempts, by_id)
        self._purge(now)
        self.cycles += 1
        mark("apply")
        report = CycleReport(now, result, done, applied, time.perf_counter() - t0, steps, snapshot)
        for observe in self.observers:
            try:
                observe(report)
            except Exception:  # metrics must never stop scheduling
                log.exception("cycle observer failed")
        return report

    def _purge(self, now: float) -> None:
        """Apply the retention TTL (every 30th cycle: a cheap indexed query at most)."""
        ttl = self.config.job_retention_s
        if ttl is None or self.cycles % 30:
            return
        with self.database.session() as session:
            gone = retention.purge_finished(session=session, finished_before=as_datetime(now - ttl))
        if gone:
            log.info("deleted %d finished job(s) past the retention of %.0fs", len(gone), ttl)

    def _forget_finished(
        self,
        attempts: Mapping[reconcile.AttemptKey, list[base.WorkerStatus]],
        live: Mapping[str, store.LiveJob],
    ) -> None:
        """Let a backend that keeps records (local) drop those of finished jobs whose
        workers are all gone, so its bookkeeping does not grow with history."""
        forget = getattr(self.backend, "forget", None)
        if forget is None:
            return
        done: dict[str, bool] = {}
        for (job_id, _), workers in attempts.items():
            ended = all(
                w.state in (base.WorkerState.SUCCEEDED, base.WorkerState.FAILED) for w in workers
            )
            done[job_id] = done.get(job_id, True) and ended and job_id not in live
        for job_id, ok in done.items():
            if ok:
                forget(job_id)

    def _snapshot(
        self,
        session: Session,
        now: float,
        nodes: tuple[model.Node, ...],
        live: list[store.LiveJob],
        attempts: Mapping[reconcile.AttemptKey, list[base.WorkerStatus]],
        draining: list[reconcile.AttemptKey],
        foreign_running: tuple[model.RunningJob, ...] = (),
        foreign_pending: tuple[model.JobRequest, ...] = (),
    ) -> model.Snapshot:
        by_id = {lj.id: lj for lj in live}
        running = [r for lj in live if (r := lj.running()) is not None]
        held = {r.job.id for r in running}
        busy: set[str] = set()
        for job_id, attempt in draining:
            busy.add(job_id)
            workers = attempts[(job_id, attempt)]
            lj = by_id.get(job_id)
            first = workers[0]
            request = (
                lj.request if lj is not None else model.JobRequest(id=job_id, queue=first.queue)
            )
            rid = job_id if job_id not in held else f"{job_id}~{attempt}"
            # A bound worker holds its GPUs until the kubelet says it is gone: a pending
            # one (pulling its image) as much as a running one.
            placements = tuple(
                model.WorkerPlacement(w.worker, w.node, w.gpus, w.fraction)
                for w in workers
                if w.state is base.WorkerState.RUNNING
                or w.still_running
                or (w.state is base.WorkerState.PENDING and w.node)
            )
            running.append(
                model.RunningJob(
                    request if rid == job_id else _renamed(request, rid),
                    placements,
                    now,
                    stopping=True,
                )
            )
            held.add(rid)
        queues = store.load_queues(session=session)
        known = {q.name for q in queues}
        running.extend(f for f in foreign_running if f.job.id not in held)
        for fp in foreign_pending:
            if fp.queue not in known:
                log.debug("foreign pod %s: unknown queue %r, not scheduled", fp.id, fp.queue)
        ids = (*by_id, *(f.id for f in foreign_pending))
        wait = {k for k in ids if self.backoff.active(k, now) or self.retries.active(k, now)}
        pending = tuple(
            lj.request
            for lj in live
            if lj.phase is Phase.PENDING
            and not lj.cancel_requested
            and lj.id not in busy
            and lj.id not in wait
        ) + tuple(
            fp
            for fp in foreign_pending
            if fp.queue in known and fp.id not in by_id and fp.id not in wait
        )
        return model.Snapshot(
            nodes=nodes,
            queues=queues,
            running=tuple(running),
            pending=pending,
            now=now,
            config=self.config.core,
        )


def _renamed(request: model.JobRequest, job_id: str) -> model.JobRequest:
    return dataclasses.replace(request, id=job_id)
