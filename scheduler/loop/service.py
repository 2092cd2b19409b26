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

One job's trouble is that job's (`_job_error`): a row that cannot be read, or an
exception while reconciling, scheduling or applying one job, becomes that job's reason
(`JobError`) and an event, and the job sits out a backoff (5 s doubling to 5 min) while
the cycle goes on for the others. A core failure is traced to the pending job that
causes it by bisection (`_schedule`); a failure with no pending job to blame (a running
job's data) still fails the cycle, since leaving a running job out would free GPUs it
holds.

Failover: a new leader adopts what runs by seeing it (the Kubernetes backend lists every
replica's pods). A backend whose workers other replicas cannot see (`local`:
`replicas_see_workers = False`) records its `instance` in each `Launched` event, and a job
launched by another instance is left alone, reported once (`WorkersElsewhere`), never
relaunched; `shoal serve --backend local` refuses to start beside a leading replica. The
old leader is fenced: before a launch or stop the cycle renews its lease (once a third of
it has passed), and refuses them (`LeaseLapsed`) once another holds it, or 2/3 of it has
passed unrenewed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from scheduler import model
from scheduler.backends import base
from scheduler.clock import Clock, WallClock, as_datetime
from scheduler.core import cycle
from scheduler.loop import apply, reconcile
from scheduler.loop import snapshot as snapshots
from scheduler.loop.backoff import Backoff
from scheduler.loop.workerenv import WorkerEnv
from scheduler.store import cycle as store
from scheduler.store import errors, retention
from scheduler.store.db import Database

log = logging.getLogger(__name__)

ScheduleFn = Callable[[model.Snapshot], model.CycleResult]
# A cycle launches and stops only within this part of the lease after it last renewed it
# (client-go's renew deadline is 2/3 of the lease), renewing it on the way once a third
# has passed: a replica that stalls and finds its lease taken writes nothing more to the
# cluster, so it cannot race the one that took over.
RENEW_FRACTION = 2 / 3


class LeaseLapsed(base.BackendError):
    """A launch or stop refused: this replica's lease may have passed to another."""

    transient = True


class _Fenced:
    """The cycle's backend: before each `launch` and `stop`, the lease taken at `taken`
    (monotonic) is renewed once a third of `ttl_s` has passed; once a renewal finds it
    another's, or 2/3 of it passed with no renewal, they are refused (`LeaseLapsed`,
    transient: the launch is kept, and finished by whoever leads next)."""

    def __init__(
        self,
        backend: base.ClusterBackend,
        *,
        taken: float,
        ttl_s: float,
        renew: Callable[[], bool],
    ) -> None:
        self._backend, self._renewed, self._ttl, self._renew = backend, taken, ttl_s, renew
        self._lost = False
        # What the loop reads of a backend besides the protocol (see reconcile.facts).
        self.replicas_see_workers = getattr(backend, "replicas_see_workers", True)
        instance = getattr(backend, "instance", None)
        if instance is not None:
            self.instance = instance

    def _check(self, what: str) -> None:
        now = time.monotonic()
        if not self._lost and now - self._renewed > self._ttl / 3:
            try:
                if self._renew():
                    self._renewed = now
                else:
                    self._lost = True
            except Exception as exc:  # the database away: the deadline below decides
                log.warning("could not renew the scheduling lease: %s", exc)
        if self._lost or time.monotonic() >= self._renewed + self._ttl * RENEW_FRACTION:
            raise LeaseLapsed(f"{what} not sent: this replica's scheduling lease has lapsed")

    def nodes(self) -> Sequence[model.Node]:
        return self._backend.nodes()

    def workers(self) -> Sequence[base.WorkerStatus]:
        return self._backend.workers()

    def launch(self, request: base.LaunchRequest) -> None:
        self._check("launch")
        self._backend.launch(request)

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        self._check("stop")
        self._backend.stop(job_id, grace_period_s, reason=reason)

    def close(self) -> None:
        self._backend.close()


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
        # Jobs whose handling raised (`_job_error`): left alone until their delay is over.
        self.faulty = Backoff(base_s=5.0, max_s=300.0)
        # Jobs launched by another replica's backend that this one cannot see (job id ->
        # that backend's instance): reported once, never relaunched.
        self.elsewhere: dict[str, str] = {}
        self.cycles = 0
        # When run_forever last began a cycle (monotonic): how /healthz tells a wedged loop.
        self.heartbeat = time.monotonic()
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
            self.heartbeat = time.monotonic()  # /healthz: a cycle that never ends is a wedge
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
            taken = time.monotonic()
            lease = store.acquire_lease(
                session=session,
                holder=self.config.holder,
                ttl_s=self.config.lease_ttl_s,
            )
            self.leading = lease
            if not lease:
                return None
            # Fenced: no launch or stop once the lease may be another replica's.
            backend = _Fenced(
                self.backend,
                taken=taken,
                ttl_s=self.config.lease_ttl_s,
                renew=lambda: store.acquire_lease(
                    session=session, holder=self.config.holder, ttl_s=self.config.lease_ttl_s
                ),
            )
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
            unreadable: list[store.Unreadable] = []
            live = store.live_jobs(session=session, unreadable=unreadable)
            mark("observe")
            # 3. reconcile
            done = reconcile.Reconciled()
            for lj in live:
                if self.faulty.active(lj.id, now):
                    continue
                workers = attempts.get((lj.id, lj.attempt), []) if lj.attempt else []
                try:
                    reconcile.job(
                        session,
                        backend,
                        lj,
                        workers,
                        now=now,
                        extra_env=self.config.worker_env,
                        done=done,
                        backoff=self.backoff,
                        retries=self.retries,
                    )
                except Exception as exc:
                    self._job_error(session, lj.id, "reconcile", exc, now)
                    done.touched += 1
            if done.changed():
                unreadable = []
                live = store.live_jobs(session=session, unreadable=unreadable)
            for bad in unreadable:
                if not self.faulty.active(bad.id, now):
                    self._job_error(session, bad.id, "reading the stored job", bad.error, now)
            by_id = {lj.id: lj for lj in live}
            keep = set(by_id) | {r.id for r in f_pending}
            self._reasons = {k: v for k, v in self._reasons.items() if k in keep}
            self.backoff.keep_only(set(by_id) | {r.id for r in f_pending})
            self.retries.keep_only(set(by_id))
            self.faulty.keep_only(keep | {u.id for u in unreadable})
            self._report_elsewhere(session, done.elsewhere, now)
            # The workers of a job that cannot be read are neither stopped nor given away:
            # their GPUs stay reserved (as draining) until the job is fixed or cancelled.
            draining = reconcile.orphans(
                backend, by_id, attempts, done, session, keep={u.id for u in unreadable}
            )
            mark("reconcile")
            # 4. snapshot
            snapshot = self._snapshot(
                session, now, nodes, live, attempts, draining, f_running, f_pending
            )
            mark("snapshot")
            # 5. schedule
            result = self._schedule(session, snapshot, now)
            mark("schedule")
            # 6. apply
            applied = apply.apply(
                session,
                backend,
                result,
                by_id,
                now=now,
                worker_env=self.config.worker_env,
                reasons=self._reasons,
                foreign=foreign,
                foreign_ids={r.id for r in snapshot.pending} - by_id.keys(),
                backoff=self.backoff,
                on_error=lambda job_id, step, exc: self._job_error(session, job_id, step, exc, now),
            )
        self._forget_finished(attempts, by_id)
        self._purge(now)
        self._drop_deleted_files()
        self.cycles += 1
        mark("apply")
        report = CycleReport(now, result, done, applied, time.perf_counter() - t0, steps, snapshot)
        for observe in self.observers:
            try:
                observe(report)
            except Exception:  # metrics must never stop scheduling
                log.exception("cycle observer failed")
        return report

    def _report_elsewhere(self, session: Session, found: Mapping[str, str], now: float) -> None:
        """Say once per job that its workers run out of this replica's sight."""
        for job_id, instance in found.items():
            if self.elsewhere.get(job_id) == instance:
                continue
            message = (
                f"its workers were launched by another replica's local backend ({instance}), "
                "which this one can neither see nor stop; they are left alone, not launched "
                "again. The local backend supports one replica per database: restart that "
                "replica (same state directory), or cancel the job"
            )
            log.error("job %s: %s", job_id, message)
            try:
                store.append_event(
                    session=session,
                    job_id=job_id,
                    kind="WorkersElsewhere",
                    reason="ReplicaMismatch",
                    message=message,
                    now=as_datetime(now),
                )
            except errors.NotFound:
                continue
        self.elsewhere = dict(found)

    def _job_error(
        self, session: Session, job_id: str, step: str, error: Exception | str, now: float
    ) -> None:
        """Make an exception while handling one job that job's reason and event, and hold
        it out of the next cycles for a backoff; never raises."""
        delay = self.faulty.hold(job_id, now)
        if isinstance(error, Exception):
            log.error("job %s: %s failed; retry in %.0fs", job_id, step, delay, exc_info=error)
            error = f"{type(error).__name__}: {error}"
        else:
            log.error("job %s: %s failed (%s); retry in %.0fs", job_id, step, error, delay)
        # A pydantic error quotes the offending value, which may be thousands of digits.
        text = error if len(error) <= 300 else error[:300] + "..."
        message = f"{step} failed for this job: {text}; retrying in {delay:.0f}s"
        try:
            session.rollback()  # whatever the failed step left half-done
            store.append_event(
                session=session,
                job_id=job_id,
                kind="JobError",
                reason=step,
                message=message,
                now=as_datetime(now),
            )
            reason = model.PendingReason(
                model.ReasonCode.JOB_ERROR, message, {"step": step, "retryInSeconds": round(delay)}
            )
            self._reasons.pop(job_id, None)
            store.set_pending_reason(session=session, job_id=job_id, reason=reason)
        except (errors.InvalidTransition, errors.NotFound):
            pass  # not Pending (its reason is the event) or deleted meanwhile
        except Exception:
            log.exception("could not record the error of job %s", job_id)

    def _schedule(
        self, session: Session, snapshot: model.Snapshot, now: float
    ) -> model.CycleResult:
        """The core's decisions; when it raises, the pending job that makes it raise is
        found by bisection (the shortest failing prefix of the pending list), made that
        job's error, and the core run again without it (at most 8 culprits a cycle)."""
        try:
            return self.schedule(snapshot)
        except Exception as first:
            error: Exception = first
        pending = list(snapshot.pending)
        for _ in range(8):
            if not pending:
                break

            def fails(n: int) -> Exception | None:
                try:
                    self.schedule(dataclasses.replace(snapshot, pending=tuple(pending[:n])))
                except Exception as exc:
                    return exc
                return None

            if fails(0) is not None:
                break  # not a pending job's fault
            lo, hi = 0, len(pending)  # pending[:lo] passes, pending[:hi] fails
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if (exc := fails(mid)) is None:
                    lo = mid
                else:
                    hi, error = mid, exc
            culprit = pending.pop(hi - 1)
            self._job_error(session, culprit.id, "scheduling", error, now)
            try:
                return self.schedule(dataclasses.replace(snapshot, pending=tuple(pending)))
            except Exception as exc:
                error = exc
        raise error

    def _purge(self, now: float) -> None:
        """Apply the retention TTL (every 30th cycle: a cheap indexed query at most)."""
        ttl = self.config.job_retention_s
        if ttl is None or self.cycles % 30:
            return
        with self.database.session() as session:
            gone = retention.purge_finished(session=session, finished_before=as_datetime(now - ttl))
        if gone:
            log.info("deleted %d finished job(s) past the retention of %.0fs", len(gone), ttl)

    def _drop_deleted_files(self) -> None:
        """Remove the files a backend keeps per job (the local backend's logs) of jobs
        the store no longer has: `DELETE /jobs/{id}` and the TTL reach only the store.
        Every 30th cycle, like the TTL."""
        files = self.backend
        if not isinstance(files, base.JobFiles) or self.cycles % 30:
            return
        with self.database.session() as session:
            gone = retention.deleted_among(session=session, job_ids=files.kept_jobs())
        for job_id in sorted(gone):
            files.drop_files(job_id)

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
        busy: set[str] = set()
        stopping: list[model.RunningJob] = []
        for job_id, attempt in draining:
            busy.add(job_id)
            workers = attempts[(job_id, attempt)]
            lj = by_id.get(job_id)
            first = workers[0]
            request = (
                lj.request if lj is not None else model.JobRequest(id=job_id, queue=first.queue)
            )
            # A bound worker holds its GPUs until the kubelet says it is gone: a pending
            # one (pulling its image) as much as a running one.
            placements = tuple(
                model.WorkerPlacement(w.worker, w.node, w.gpus, w.fraction)
                for w in workers
                if w.state is base.WorkerState.RUNNING
                or w.still_running
                or (w.state is base.WorkerState.PENDING and w.node)
            )
            # An earlier attempt still draining while its job holds GPUs again is an entry
            # of its own: the core tells them apart by `RunningJob.key` (id, attempt).
            stopping.append(
                model.RunningJob(request, placements, now, stopping=True, attempt=attempt)
            )
        queues = store.load_queues(session=session)
        known = {q.name for q in queues}
        for fp in foreign_pending:
            if fp.queue not in known:
                log.debug("foreign pod %s: unknown queue %r, not scheduled", fp.id, fp.queue)
        ids = (*by_id, *(f.id for f in foreign_pending))
        wait = {
            k
            for k in ids
            if self.backoff.active(k, now)
            or self.retries.active(k, now)
            or self.faulty.active(k, now)
        }
        return snapshots.build(
            nodes=nodes,
            queues=queues,
            live=live,
            now=now,
            config=self.config.core,
            stopping=stopping,
            draining=busy,
            held_back=wait,
            foreign_running=foreign_running,
            foreign_pending=foreign_pending,
        )
