"""The scheduler loop: the only writer of placements. `Loop.run_once()` is one cycle;
`Loop.run_forever()` repeats it on a timer and whenever `wake()` is called (a new
submission, a worker changing state).

One cycle, in order:
  1. lease     - hold the single-scheduler lease, else do nothing this time
  2. observe   - nodes and workers from the backend; live jobs from the store
  3. reconcile - phases follow workers; re-launch a recorded but unlaunched attempt;
                 stop workers whose job no longer holds them (see `phases`)
  4. snapshot  - queues, running (stopping workers keep their GPUs), pending, `now`;
                 plus a `ForeignWorkloads` backend's foreign pods (bound: running)
  5. schedule  - `scheduler.core.cycle.schedule(snapshot)`, pure
  6. apply     - preempt (store, then stop), place (record, then launch), reasons
The store is written before the backend is touched at every step, so a crash at any
point leaves a state the next cycle (in this or a restarted process) completes.

One job's trouble is that job's (`isolation.record`): a row that cannot be read, or an
exception while reconciling, scheduling or applying one job, becomes that job's reason
(`JobError`) and an event, and the job sits out a backoff (5 s doubling to 5 min) while
the cycle goes on for the others. A core failure is traced to the pending job that
causes it by bisection (`isolation.schedule`); a failure with no pending job to blame (a
running job's data) still fails the cycle, since leaving a running job out would free
GPUs it holds.

Failover: a new leader adopts what runs by seeing it (the Kubernetes backend lists every
replica's pods). A backend whose workers other replicas cannot see (`local`: its
capabilities' `LocalWorkers`) records its `instance` and state directory in a
`Launching` event before a launch and in its `Launched` event; the next leader on the
same host adopts that attempt from the record there (`backends.local.elsewhere`: it then
sees, stops and finishes it, and starts only workers never started). One it cannot read
is left alone, reported once (`WorkersElsewhere`), never relaunched, and keeps its GPUs
even when cancelled, since nothing here can stop it; `shoal serve --backend local`
refuses to start beside a leading replica. The old leader is fenced (`fence.Fenced`):
before any write to the cluster (a launch, a stop, a foreign bind or note, an adoption)
the cycle renews its lease (once a third of it has passed), and refuses them
(`LeaseLapsed`) once another holds it, or 2/3 of it has passed unrenewed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection

from scheduler import model
from scheduler.backends import base
from scheduler.clock import Clock, WallClock, as_datetime
from scheduler.core import cycle
from scheduler.loop import apply, collector, housekeeping, isolation, launching, phases, resize
from scheduler.loop import snapshot as snapshots
from scheduler.loop.cache import SchedulerCache
from scheduler.loop.config import CycleReport, LoopConfig
from scheduler.loop.context import Cycle, Memory
from scheduler.loop.fence import Fenced
from scheduler.loop.seen import Seen, Steps
from scheduler.spec import Phase
from scheduler.store import port
from scheduler.store.live import Unreadable
from scheduler.store.port import LiveStore

__all__ = ["CycleReport", "Loop", "LoopConfig", "ScheduleFn"]

log = logging.getLogger(__name__)

ScheduleFn = isolation.ScheduleFn


class Loop:
    def __init__(
        self,
        database: port.Storage,
        backend: base.ClusterBackend,
        *,
        clock: Clock | None = None,
        config: LoopConfig | None = None,
        schedule: ScheduleFn | None = None,
    ) -> None:
        self.database = database
        self.backend = backend
        self.capabilities = backend.capabilities()  # resolved once: typed, never probed
        self.clock = clock or WallClock()
        self.config = config or LoopConfig()
        self.schedule = schedule or cycle.schedule
        self._wake = threading.Event()
        self._inventory: tuple[model.Node, ...] | None = None
        self._capacity: tuple[model.Node, ...] | None = None
        # What the loop remembers of jobs between cycles (reasons written, backoffs...).
        self.memory = Memory()
        # What the loop keeps between cycles, so that a cycle costs what changed.
        self.cache = SchedulerCache(self.config.full_pass_every)
        # The draining attempts last written to the store (None: not yet, this leader).
        self._draining_shown: tuple[object, ...] | None = None
        self.cycles = 0
        # When run_forever last began a cycle (monotonic): how /healthz tells a wedged loop.
        self.heartbeat = time.monotonic()
        # Whether the last cycle held the lease (and, when elected, the Lease): leader status.
        self.leading = False
        self._renewed = -math.inf  # when this replica last renewed the lease (monotonic)
        # Called with every completed cycle's report (the API's metrics); must not raise.
        self.observers: list[Callable[[CycleReport], None]] = []

    def wake(self) -> None:
        self._wake.set()

    def run_forever(self, stop: threading.Event) -> None:
        """Cycle until `stop` is set; errors (a database restart) are logged, not fatal."""
        while not stop.is_set():
            self._wake.clear()
            self.heartbeat = time.monotonic()  # /healthz: a cycle that never ends is a wedge
            try:
                self.run_once()
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                stop.wait(1.0)
            self._wake.wait(self.config.interval_s)
        with port.opened(self.database) as db:
            db.release_lease(holder=self.config.holder)

    def run_once(self) -> CycleReport | None:
        with collector.paused():  # see scheduler.loop.collector: why
            return self._cycle()

    def _cycle(self) -> CycleReport | None:
        steps = Steps()
        now = self.clock.now()
        if self.config.is_leader is not None and not self.config.is_leader():
            self.leading = False
            return None
        with port.opened(self.database) as db:
            was_leading = self.leading
            backend = self._lease(db)  # 1. lease
            if backend is None:
                return None
            self.cache.begin(leading_again=not was_leading)
            steps.mark("lease")
            here = Cycle(
                db,
                backend,
                now,
                self.config.worker_env,
                self.memory,
                lambda job_id, step, exc: self._job_error(db, job_id, step, exc, now),
            )
            seen = self._observe(db, now)  # 2. observe
            steps.mark("observe")
            self._reconcile(here, seen)  # 3. reconcile
            by_id = seen.by_id
            steps.mark("reconcile")
            snapshot = self._snapshot(db, now, seen)  # 4. snapshot
            steps.mark("snapshot")
            result = isolation.schedule(  # 5. schedule
                self.schedule,
                snapshot,
                lambda job_id, exc: self._job_error(db, job_id, "scheduling", exc, now),
            )
            steps.mark("schedule")
            foreign_ids = {r.id for r in snapshot.pending} - by_id.keys()
            applied = apply.apply(here, result, by_id, foreign_ids)  # 6. apply
            self.cache.wrote(applied.wrote)
        housekeeping.forget_finished(self.capabilities.records, seen.attempts, by_id)
        housekeeping.purge(self.database, self.config.job_retention_s, self.cycles, now)
        housekeeping.drop_deleted_files(self.database, self.capabilities.files, self.cycles)
        self.cycles += 1
        steps.mark("apply")
        seconds = time.perf_counter() - steps.start
        report = CycleReport(
            now, result, seen.done, applied, seconds, steps.seconds, snapshot, self.cache.summary()
        )
        for observe in self.observers:
            try:
                observe(report)
            except Exception:  # metrics must never stop scheduling
                log.exception("cycle observer failed")
        return report

    def _lease(self, db: LiveStore) -> Fenced | None:
        """Hold the single-scheduler lease; the cycle's backend, fenced: no launch or
        stop once the lease may be another replica's. None: another replica leads."""
        ttl, now = self.config.lease_ttl_s, time.monotonic()
        if not self.leading or now - self._renewed >= ttl / 3:
            # Held and renewed under a third of its term ago, it is this replica's until
            # at least 2/3 of the term from now: no write needed (the fence renews it
            # before any cluster write once a third has passed).
            self.leading = db.acquire_lease(holder=self.config.holder, ttl_s=ttl)
            self._renewed = now
        if not self.leading:
            return None
        return Fenced(
            self.backend,
            self.capabilities,
            taken=self._renewed,
            ttl_s=self.config.lease_ttl_s,
            renew=lambda: db.acquire_lease(
                holder=self.config.holder, ttl_s=self.config.lease_ttl_s
            ),
        )

    def _observe(self, db: LiveStore, now: float) -> Seen:
        """Nodes and workers from the backend (foreign pods too); live jobs from the store."""
        nodes = tuple(self.backend.nodes())
        if nodes != self._inventory:
            db.save_inventory(nodes=nodes, now=as_datetime(now))
            self._inventory = nodes
        # Admission's "can never run" is judged against the nodes as if empty.
        reporter = self.capabilities.capacity
        capacity = tuple(reporter.capacity()) if reporter else nodes
        if capacity != self._capacity:
            db.save_capacity(nodes=capacity, now=as_datetime(now))
            self._capacity = capacity
        foreign = self.capabilities.foreign
        f_running = tuple(foreign.foreign_running()) if foreign else ()
        f_pending = tuple(foreign.foreign_requests()) if foreign else ()
        adopted = {r.job.id for r in f_running}
        # Adopted foreign pods are not the store's jobs: never orphans.
        attempts = phases.by_attempt([w for w in self.backend.workers() if w.job_id not in adopted])
        unreadable: list[Unreadable] = []
        live = self.cache.read(db, unreadable)
        return Seen(nodes, foreign, f_running, f_pending, attempts, live, unreadable)

    def _reconcile(self, here: Cycle, seen: Seen) -> None:
        """Phases follow workers (`phases.job`, per job, its errors its own); then the
        loop's memory shrinks to the live jobs, and orphaned attempts stop."""
        done, memory, db, now, cache = seen.done, self.memory, here.db, here.now, self.cache
        self._reconcile_jobs(here, seen)
        # Launches finished (or refused) and adoptions wrote outside `enact`'s results:
        # read those rows back; what `flush` enacted the cache takes over.
        outside = done.changed()
        cache.wrote(phases.flush(here, done))
        # Launches the backend finished on its own threads (after `flush`: a job it
        # moved is read again, and one that moved on is left alone).
        done.touched += launching.settle(here, seen.by_id)
        if outside or done.touched:
            missed: list[Unreadable] = []
            seen.reread(db.live_jobs(unreadable=missed, cache=cache.live), missed)
        elif done.changed():  # only `flush` wrote: the cache holds what it wrote
            seen.reread(cache.live_now(seen.live), seen.unreadable)
        for bad in seen.unreadable:
            if not memory.faulty.active(bad.id, now):
                self._job_error(db, bad.id, "reading the stored job", bad.error, now)
        by_id = seen.by_id
        unreadable = {u.id for u in seen.unreadable}
        memory.keep_only(set(by_id), {r.id for r in seen.foreign_pending}, unreadable)
        memory.elsewhere = housekeeping.report_elsewhere(db, memory.elsewhere, done.elsewhere, now)
        # The workers of a job that cannot be read are neither stopped nor given away:
        # their GPUs stay reserved (as draining) until the job is fixed or cancelled.
        look = cache.unsettled_attempts(seen.attempts, by_id)
        seen.draining = phases.orphans(here.backend, by_id, look, done, db, keep=unreadable)
        cache.attempts_held(look, seen.attempts, by_id, seen.draining)
        cache.forget(by_id)

    def _reconcile_jobs(self, here: Cycle, seen: Seen) -> None:
        """`phases.job` for each live job the cache does not know to be quiet (all of
        them in a full pass), its errors its own."""
        done, cache, now = seen.done, self.cache, here.now
        for lj in seen.live:
            if self.memory.faulty.active(lj.id, now):
                continue
            workers = seen.attempts.get((lj.id, lj.attempt), []) if lj.attempt else []
            quiet = cache.quiet(lj, workers, now)
            if quiet and not cache.full:
                continue
            before = done.size()
            try:
                phases.job(here, lj, workers, done)
            except Exception as exc:
                self._job_error(here.db, lj.id, "reconcile", exc, now)
                done.touched += 1
            cache.reconciled(lj, workers, now, was_quiet=quiet, acted=done.size() != before)

    def _job_error(
        self, db: LiveStore, job_id: str, step: str, error: Exception | str, now: float
    ) -> None:
        isolation.record(db, self.memory, job_id, step, error, now)

    def _disruptions(self, db: LiveStore, now: float, seen: Seen) -> dict[str, str]:
        """job id -> the disruption budget that holds its workers (the core prefers other
        victims, a preemptor says what it waits for); a draining job's wait is said
        once on its events (`housekeeping.report_blocked`)."""
        budgets = self.capabilities.disruptions
        if budgets is None:
            return {}
        blocked = dict(budgets.disruption_blocked())
        draining = {job_id for job_id, _ in seen.draining}
        waiting = {job_id: why for job_id, why in blocked.items() if job_id in draining}
        self.memory.blocked = housekeeping.report_blocked(db, self.memory.blocked, waiting, now)
        return blocked

    def _job_rules(self, seen: Seen, held_back: Collection[str]) -> dict[str, model.NodeRules]:
        """The backend's node rules for the pending jobs this cycle may place (their
        volumes' topology: `base.JobNodeRules`)."""
        rules = self.capabilities.job_rules
        if rules is None:
            return {}
        out: dict[str, model.NodeRules] = {}
        for lj in seen.live:
            if lj.phase is not Phase.PENDING or lj.id in held_back:
                continue
            if (got := rules.job_rules(lj.spec)) is not None:
                out[lj.id] = got
        return out

    def _snapshot(self, db: LiveStore, now: float, seen: Seen) -> model.Snapshot:
        queues = db.load_queues()
        wait = self.memory.held_back(now)
        stopping = snapshots.draining_attempts(seen.draining, seen.attempts, seen.by_id, now)
        stopping += resize.leftovers(seen.live, seen.attempts, now)
        shown = tuple(sorted((r.job.id, r.attempt, r.placements) for r in stopping))
        if shown != self._draining_shown:  # every view of the inventory shows them
            db.record_draining(stopping=stopping, now=as_datetime(now))
            self._draining_shown = shown
        snapshot = snapshots.build(
            nodes=seen.nodes,
            queues=queues,
            live=seen.live,
            held=self.cache.running(seen.live),
            now=now,
            config=self.config.core,
            stopping=stopping,
            draining={job_id for job_id, _ in seen.draining},
            held_back=wait,
            foreign_running=seen.foreign_running,
            foreign_pending=seen.foreign_pending,
            unstoppable=self.memory.elsewhere.keys(),
            disruption_blocked=self._disruptions(db, now, seen),
            job_rules=self._job_rules(seen, wait),
        )
        if self.backend.capabilities().resizable is None:
            return resize.rigid(snapshot)
        return snapshot
