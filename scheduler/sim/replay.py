"""`shoal simulate`: replay a job trace in virtual time through the real loop and core,
on the in-memory store (`store.memory`) and the sim backend instead of a database and a
cluster. `database_url` replays on a database instead (the store's rules are one, so the
decisions are the same: tests/loop/test_sim_memory.py).

The clock jumps from event to event: the next arrival, the next worker end, and while
jobs wait, a tick (so minimum runtimes and reservations can expire). After a cycle whose
core decided nothing (nothing placed or preempted), the ticks that follow see the very
same snapshot, so they decide nothing either until time itself flips a rule
(`scheduler.loop.timing.next_change`: a minimum runtime ends, a job starts to starve, a
backoff or a maxRuntime runs out). The fast path (the default) jumps over those ticks to
the first one at or after that instant, and reads the store back only after a cycle that
changed something; `every_tick=True` runs every tick as before. Both make the same
decisions at the same virtual times (tests/loop/test_sim_fast.py).

Measured: utilisation over time (GPUs held / GPUs in the cluster, time-weighted) and
per queue, queueing delay per queue (submit to first launch), preemptions, and
guarantee violations: time during which a queue with a pending job that fits in its
guarantee holds less than that guarantee while another queue holds more than its own.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduler import model
from scheduler.backends.sim.backend import SimBackend
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop import timing
from scheduler.loop.service import CycleReport, Loop, LoopConfig
from scheduler.sim.report import SimReport, count_violations, count_waits, record
from scheduler.sim.trace import TraceJob
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import open_database
from scheduler.store.live import LiveCache, LiveJob, live_jobs
from scheduler.store.memory import MemoryStore
from scheduler.store.port import Storage
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job

__all__ = ["SimReport", "default_queues", "simulate"]  # SimReport lives in sim.report


def default_queues(jobs: Sequence[TraceJob], gpus: float) -> list[QueueSpec]:
    """One queue per trace queue, the cluster's GPUs split evenly as guarantees."""
    names = sorted({j.queue for j in jobs})
    share = round(gpus / max(1, len(names)), 3)
    return [QueueSpec.model_validate({"name": n, "guaranteed": share}) for n in names]


def _spec(j: TraceJob, models: set[str]) -> tuple[JobSpec, bool]:
    types = [t for t in j.gpu_type if t in models]
    return (
        JobSpec(
            name=j.name,
            queue=j.queue,
            image="sim",
            command=["sim"],
            workers=j.workers,
            gpu=j.gpu,
            gpu_type=types,
            priority=j.priority,
            cpu=f"{j.cpu_milli}m",
            memory=f"{j.memory_mib}Mi",
        ),
        len(types) != len(j.gpu_type),
    )


def _decided_nothing(report: CycleReport | None) -> bool:
    """Whether the core's decisions changed nothing: the store and the backend after the
    cycle are what its snapshot showed (reconcile runs before the snapshot, so what it
    changed is in there), and so a cycle at a later time sees the same snapshot."""
    if report is None:
        return False
    r, a = report.result, report.applied
    return not (r.places or r.preempts or a.placed or a.preempted or a.launch_failed)


def _quiet(report: CycleReport | None) -> bool:
    """Whether the cycle left the store and the backend as it found them (reasons aside)."""
    if report is None:
        return False
    done = report.reconciled
    return _decided_nothing(report) and not (done.changed() or done.orphans_stopped)


def simulate(
    jobs: Sequence[TraceJob],
    nodes: Sequence[model.Node],
    *,
    queues: Sequence[QueueSpec] | None = None,
    config: model.Config | None = None,
    tick_s: float = 60.0,
    arrival_scale: float = 1.0,
    max_cycles: int = 100_000,
    progress: Callable[[int, int], None] | None = None,
    every_tick: bool = False,
    observe: Callable[[CycleReport], None] | None = None,
    database_url: str | None = None,
) -> SimReport:
    """Replay `jobs`; `progress(done, total)` is called after every cycle with the number of
    jobs that have left the system (finished or never to be placed) out of all of them.
    `every_tick` runs a cycle at every idle tick (the slow path, for comparison).
    `observe` sees every cycle's report (its snapshot and decisions) as it happens.
    `database_url`: replay on that database (empty) instead of in memory."""
    if not jobs:
        raise ValueError("the trace has no GPU jobs")
    clock = VirtualClock(start=1_700_000_000.0)
    # arrival_scale < 1 compresses the arrivals (more load); durations stay as traced.
    arrivals = sorted(
        (dataclasses.replace(j, submit=j.submit * arrival_scale) for j in jobs),
        key=lambda j: (j.submit, j.name),
    )
    doors: Doors = MemoryStore() if database_url is None else _SqlDoors(database_url)
    try:
        run = _Run.start(doors, arrivals, nodes, clock, queues, config, tick_s, every_tick)
        run.drive(max_cycles, progress, observe)
    finally:
        if isinstance(doors, _SqlDoors):
            doors.storage.close()
    return run.rep


class Doors(Protocol):
    """What the replay does beside the loop: make queues, submit the jobs as they arrive,
    read the live jobs back; and the storage the loop runs on."""

    @property
    def storage(self) -> Storage: ...
    def add_queue(self, spec: QueueSpec) -> None: ...
    def submit(self, spec: JobSpec, *, job_id: str, now: datetime, by: str) -> object: ...
    def live_jobs(self, *, cache: LiveCache | None = None) -> list[LiveJob]: ...


class _SqlDoors:
    """The doors on a database: the store's functions, a session each."""

    def __init__(self, url: str) -> None:
        self.storage = open_database(url)

    def add_queue(self, spec: QueueSpec) -> None:
        with self.storage.session() as s:
            create_queue(session=s, spec=spec)

    def submit(self, spec: JobSpec, *, job_id: str, now: datetime, by: str) -> object:
        with self.storage.session() as s:
            return submit_job(session=s, spec=spec, submitter=by, now=now, job_id=job_id)

    def live_jobs(self, *, cache: LiveCache | None = None) -> list[LiveJob]:
        with self.storage.session() as s:
            return live_jobs(session=s, cache=cache)


@dataclass
class _Run:
    """One replay's state: the jobs in arrival order (`i` is the next to arrive), the
    loop it drives, and what it has seen so far."""

    jobs: list[TraceJob]
    base_t: float  # virtual time of a submit offset of 0
    clock: VirtualClock
    doors: Doors
    backend: SimBackend
    loop: Loop
    models: set[str]  # GPU models in the cluster
    total_gpus: float
    tick_s: float
    every_tick: bool
    rep: SimReport
    submitted: dict[str, tuple[str, float, str]] = field(
        default_factory=dict
    )  # id -> (queue, submit time, name)
    first_start: dict[str, float] = field(default_factory=dict)
    i: int = 0
    reasons: dict[str, model.PendingReason] = field(default_factory=dict)  # the last cycle's
    total_cpu: int = 0
    total_mem: int = 0
    seen: LiveCache = field(default_factory=LiveCache)  # the live jobs last read

    @classmethod
    def start(
        cls,
        doors: Doors,
        jobs: list[TraceJob],
        nodes: Sequence[model.Node],
        clock: VirtualClock,
        queues: Sequence[QueueSpec] | None,
        config: model.Config | None,
        tick_s: float,
        every_tick: bool,
    ) -> _Run:
        """The loop on `doors`' storage and a sim backend over `nodes`, with the queues
        created."""
        total_gpus = float(sum(n.gpu_count for n in nodes))
        base_t = clock.now() - jobs[0].submit
        backend = SimBackend(nodes, clock)
        loop = Loop(
            doors.storage,
            backend,
            clock=clock,
            config=LoopConfig(holder="sim", lease_ttl_s=1e9, core=config or model.Config()),
        )
        qspecs = list(queues) if queues is not None else default_queues(jobs, total_gpus)
        guaranteed = {q.name: q.guaranteed.total or 0.0 for q in qspecs}
        for qs in qspecs:
            doors.add_queue(qs)
        rep = SimReport(len(jobs), 0, 0, 0, clock.now(), clock.now(), 0, guaranteed=guaranteed)
        models = {n.gpu_model for n in nodes}
        run = cls(
            jobs, base_t, clock, doors, backend, loop, models, total_gpus, tick_s, every_tick, rep
        )
        run.total_cpu = sum(n.cpu_milli for n in nodes)
        run.total_mem = sum(n.memory_mib for n in nodes)
        return run

    def drive(
        self,
        max_cycles: int,
        progress: Callable[[int, int], None] | None,
        observe: Callable[[CycleReport], None] | None = None,
    ) -> None:
        """Cycle from event to event until every job has left or nothing is left to happen."""
        rep = self.rep
        live: list[LiveJob] = []
        t = self.clock.now()
        while rep.cycles < max_cycles:
            self.clock.advance_to(t)
            arrived = self.arrive(t)
            report = self.loop.run_once()
            rep.cycles += 1
            if report is not None:
                record(rep, report, t, self.submitted, self.first_start)
                if observe is not None:
                    observe(report)
            # A quiet cycle changed no job: what the store held before it, it holds now.
            if self.every_tick or arrived or not _quiet(report):
                live = self.doors.live_jobs(cache=self.seen)  # only what moved is read whole
            held = self.sample(t)
            waiting = [lj for lj in live if lj.phase is Phase.PENDING]
            nxt = self.next_times(t, report, live, waiting)
            step = (min(nxt) if nxt else t) - t
            count_violations(rep, waiting, held, rep.guaranteed, step)
            if report is not None:  # a quiet cycle's reasons are the last ones again
                self.reasons = {k.job_id: k.reason for k in report.result.pending}
            count_waits(rep, self.reasons, [lj.id for lj in waiting], step)
            self.backend.forget_finished({lj.id for lj in live})
            if progress is not None:
                progress(self.i - len(live), len(self.jobs))
            if not nxt or (not live and self.i >= len(self.jobs)):
                break
            t = min(nxt)
        rep.end = self.clock.now()
        rep.placed = len(self.first_start)
        rep.placed_ids = set(self.first_start)
        rep.never_placed = len(self.submitted) - len(self.first_start) + (len(self.jobs) - self.i)
        rep.finished = len(self.submitted) - len(live)

    def arrive(self, t: float) -> bool:
        """Submit the jobs due by `t`; whether any were."""
        arrived = False
        while self.i < len(self.jobs) and self.base_t + self.jobs[self.i].submit <= t:
            job = self.jobs[self.i]
            spec, dropped = _spec(job, self.models)
            self.rep.dropped_gpu_types += dropped
            # Ids in arrival order: the core breaks ties by id, so a random id would
            # make two replays of one trace differ.
            job_id = f"{self.i:016x}"
            self.doors.submit(spec, job_id=job_id, now=as_datetime(t), by="sim")
            self.backend.durations[job_id] = job.duration
            self.submitted[job_id] = (spec.queue, t, spec.name)
            self.i += 1
            arrived = True
        return arrived

    def sample(self, t: float) -> dict[str, float]:
        """GPUs each queue holds at `t`, recorded with the cluster's share in use."""
        held: dict[str, float] = defaultdict(float)
        for a in self.backend.attempts.values():
            if a.ends() > t:
                held[a.request.spec.queue] += sum(p.gpus_held for p in a.request.placements)
        total = self.total_gpus
        self.rep.utilisation.append((t, sum(held.values()) / total if total else 0.0))
        self.rep.usage.append(dict(held))
        cpu = mem = 0
        for a in self.backend.attempts.values():
            if a.ends() > t:
                cpu += a.request.spec.cpu_milli * len(a.request.placements)
                mem += a.request.spec.memory_mib * len(a.request.placements)
        self.rep.cpu.append(cpu / self.total_cpu if self.total_cpu else 0.0)
        self.rep.memory.append(mem / self.total_mem if self.total_mem else 0.0)
        return held

    def next_times(
        self,
        t: float,
        report: CycleReport | None,
        live: Sequence[LiveJob],
        waiting: Sequence[LiveJob],
    ) -> list[float]:
        """Candidate instants for the next cycle (empty: nothing left to happen)."""
        events = [self.base_t + self.jobs[self.i].submit] if self.i < len(self.jobs) else []
        if (e := self.backend.next_event()) is not None:
            events.append(e)
        nxt = list(events)
        if waiting and (nxt or any(lj.phase in (Phase.SCHEDULED, Phase.RUNNING) for lj in live)):
            tick = t + self.tick_s
            if not self.every_tick and report is not None and _decided_nothing(report):
                tick = _skip(self.rep, report, self.loop, t, self.tick_s, min(events, default=None))
            nxt.append(tick)
        if any(lj.phase is Phase.SCHEDULED for lj in live):
            nxt.append(t)  # let Scheduled become Running at the same instant
        return nxt


def _skip(
    rep: SimReport,
    report: CycleReport,
    loop: Loop,
    t: float,
    tick_s: float,
    event: float | None,
) -> float:
    """After a cycle at `t` that decided nothing, the first tick that may decide
    something: the first at or after the next time-dependent change, stepping as the
    slow path does (t + tick + tick ..., the same floats). Ticks passed over would
    repeat this cycle's decisions exactly: their invariant reports are counted as if
    they had run."""
    assert report.snapshot is not None
    change = timing.next_change(report.snapshot, (loop.memory.launches, loop.memory.retries))
    tick = t + tick_s
    if change is None and event is None:
        return tick  # nothing will ever change: no tick to skip towards
    skipped = 0
    while (change is None or tick < change) and (event is None or tick < event):
        tick += tick_s
        skipped += 1
    rep.skipped_ticks += skipped
    for v in report.result.violations:
        rep.invariant_reports[v.kind] = rep.invariant_reports.get(v.kind, 0) + skipped
    return tick
