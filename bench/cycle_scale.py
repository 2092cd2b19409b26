"""One scheduling cycle at scale, step by step (issue 10, item 14).

    nice .venv/bin/python -m bench.cycle_scale                  # pure core, 1,000 x 8 GPUs
    nice .venv/bin/python -m bench.cycle_scale --loop           # + the loop on the sim backend
    nice .venv/bin/python -m bench.cycle_scale --profile F.prof # cProfile of the core cycles

1. Core: a snapshot built directly: `--nodes` nodes of 8 GPUs, about 9.5 pods per node
   running (6 whole-GPU workers, one of them in a 4-node gang, two half-GPU workers on
   one GPU, one CPU-only worker, and on every second node one more whole GPU), spread
   over 8 queues with mixed priorities and ages, plus `--pending` pending jobs (whole,
   2-GPU, half-GPU, and 2 x 8-GPU gangs) so that placement, reasons and the preemption
   search all run. Each step of `scheduler.core.cycle.run` is timed on its own (the
   same calls in the same order), then the whole `schedule` `--repeat` times.
2. `--loop`: the same cluster on the sim backend with a SQLite store: the running jobs
   and the pending ones are submitted, the first cycles launch them, then `--cycles`
   steady cycles are timed by the loop's own step marks (CycleReport.steps).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pickle
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from scheduler import model as m
from scheduler import placement
from scheduler.core import (
    accounting,
    admission,
    cycle,
    fairshare,
    invariants,
    ordering,
    preemption,
    workingset,
)

if TYPE_CHECKING:  # the loop's types, for annotations: the core part needs no store
    from scheduler.backends.sim import SimBackend
    from scheduler.clock import VirtualClock
    from scheduler.loop.config import CycleReport
    from scheduler.loop.service import Loop

GPUS = 8
QUEUES = 8
T = TypeVar("T")


def _node(i: int) -> m.Node:
    return m.Node(f"n{i:04d}", cpu_milli=128_000, memory_mib=1_048_576, gpu_count=GPUS,
                  gpu_model="A100", gpu_memory_mib=81_920)  # fmt: skip


def _job(jid: str, k: int, **kw: object) -> m.JobRequest:
    base: dict[str, object] = dict(queue=f"q{k % QUEUES}", gpu=1.0, cpu_milli=4000,
                                   memory_mib=32_768, priority=k % 3,
                                   submitted_at=float(k))  # fmt: skip
    base.update(kw)
    return m.JobRequest(jid, **base)  # type: ignore[arg-type]


def cluster(nodes: int, pending: int, starving: int = 0) -> m.Snapshot:
    """The scale snapshot: see the module docstring. Pending jobs have waited under 500 s
    (below the policy's starvation time) but for the first `starving`, which have waited
    past it and so search for a reservation (`core.reservation`)."""
    ns = [_node(i) for i in range(nodes)]
    running: list[m.RunningJob] = []
    now = 100_000.0

    def run(jid: str, k: int, places: Sequence[m.WorkerPlacement], **kw: object) -> None:
        job = _job(jid, k, workers=len(places), **kw)
        running.append(m.RunningJob(job, tuple(places), started_at=now - 50 * (k % 400)))

    k = 0
    for i, n in enumerate(ns):
        if i % 4 == 0 and i + 4 <= nodes:  # a 4-worker gang on GPU 0 of 4 nodes
            run(f"g{i}", k, [m.WorkerPlacement(w, ns[i + w].name, (0,)) for w in range(4)])
            k += 1
        first = 1 if i - i % 4 + 4 <= nodes else 0
        if not first:
            run(f"w{i}-0", k, [m.WorkerPlacement(0, n.name, (0,))])
            k += 1
        for g in range(1, 6):
            run(f"w{i}-{g}", k, [m.WorkerPlacement(0, n.name, (g,))])
            k += 1
        for h in range(2):
            run(f"h{i}-{h}", k, [m.WorkerPlacement(0, n.name, (6,), 0.5)], gpu=0.5)
            k += 1
        run(f"c{i}", k, [m.WorkerPlacement(0, n.name)], gpu=0.0)
        k += 1
        if i % 2:
            run(f"w{i}-7", k, [m.WorkerPlacement(0, n.name, (7,))])
            k += 1
    waiting: list[m.JobRequest] = []
    for j in range(pending):
        kind = j % 10
        at = now - (j % 500) - (1_000 if j < starving else 0)
        if kind < 6:
            waiting.append(_job(f"p{j}", j, submitted_at=at))
        elif kind < 8:
            waiting.append(_job(f"p{j}", j, gpu=2.0, submitted_at=at))
        elif kind == 8:
            waiting.append(_job(f"p{j}", j, gpu=0.5, submitted_at=at))
        else:
            waiting.append(_job(f"p{j}", j, gpu=8.0, workers=2, submitted_at=at))
    guarantee = nodes * GPUS / QUEUES * 0.8
    queues = tuple(
        m.Queue(f"q{q}", guaranteed=m.Quota(total=guarantee), weight=1.0 + q % 3)
        for q in range(QUEUES)
    )
    return m.Snapshot(tuple(ns), queues, tuple(running), tuple(waiting), now=now)


def _timed(steps: dict[str, list[float]], name: str, fn: Callable[[], T]) -> T:
    t = time.process_time()  # CPU time: the shared machine's wall clock is noisy
    out = fn()
    steps.setdefault(name, []).append(time.process_time() - t)
    return out


def core_steps(snap: m.Snapshot, steps: dict[str, list[float]]) -> m.CycleResult:
    """`cycle.run`, step by step, with `Context.build` split into its parts."""
    nodes = _timed(steps, "ctx: index nodes", lambda: {n.name: n for n in snap.nodes})
    tree = _timed(steps, "ctx: queue tree", lambda: accounting.QueueTree.build(snap.queues))
    _timed(steps, "ctx: estimator", lambda: accounting.PendingGpus(snap.nodes))
    ledger = _timed(
        steps, "ctx: ledger", lambda: accounting.build_ledger(tree, snap.running, nodes)
    )
    _timed(
        steps, "ctx: over guarantee", lambda: workingset.over_guarantee(tree, snap.running, nodes)
    )
    _timed(
        steps,
        "ctx: placement state",
        lambda: placement.ClusterState.build(snap.nodes, sorted(snap.running, key=lambda r: r.key)),
    )
    del ledger
    ctx = _timed(steps, "context (whole)", lambda: workingset.WorkingSet.build(snap))
    ctx.shares = _timed(
        steps,
        "fair share",
        lambda: fairshare.compute(ctx.tree, ctx.capacity, ctx.ledger.usage, ctx.demand),
    )
    _timed(steps, "invariants", lambda: invariants.check(snap))
    ordered = _timed(
        steps,
        "ordering",
        lambda: ordering.order_pending(snap.pending, ctx.tree, ctx.shares, ctx.ledger, ctx.est),
    )
    admitted = _timed(steps, "admission", lambda: admission.admit(ctx, ordered))
    _timed(steps, "preemption", lambda: preemption.preempt(ctx, admitted.failed))
    t, cpu = time.perf_counter(), time.process_time()
    result = cycle.schedule(snap)
    steps.setdefault("schedule (whole)", []).append(time.process_time() - cpu)
    steps.setdefault("schedule (whole, wall)", []).append(time.perf_counter() - t)
    return result


def core(args: argparse.Namespace, out: object) -> None:
    snap = cluster(args.nodes, args.pending)
    pods = sum(len(r.placements) for r in snap.running)
    w = sys.stdout.write
    w(f"core: {args.nodes} nodes x {GPUS} GPUs, {len(snap.running)} running jobs ({pods} pods),"
      f" {len(snap.pending)} pending, policy {snap.config.policy}\n\n")  # fmt: skip
    steps: dict[str, list[float]] = {}
    result = core_steps(snap, steps)  # warm-up, not counted
    steps.clear()
    prof = cProfile.Profile() if args.profile else None
    for _ in range(args.repeat):
        if prof:
            prof.enable()
        result = core_steps(snap, steps)
        if prof:
            prof.disable()
    if prof:
        prof.dump_stats(args.profile)
    w(f"placed {len(result.places)}, preempts {len(result.preempts)}, "
      f"pending {len(result.pending)}, violations {len(result.violations)}\n\n")  # fmt: skip
    w("| step | median CPU ms | min CPU ms |\n|---|---|---|\n")
    for name, secs in steps.items():
        w(f"| {name} | {statistics.median(secs) * 1e3:.1f} | {min(secs) * 1e3:.1f} |\n")


def _submit(db: object, snap: m.Snapshot, now: float) -> None:
    from scheduler.clock import as_datetime
    from scheduler.spec import JobSpec
    from scheduler.spec.queue import QueueSpec
    from scheduler.store.db import Database
    from scheduler.store.queues import create_queue
    from scheduler.store.submission import submit_job

    assert isinstance(db, Database)
    with db.session() as s:
        for q in snap.queues:
            queue = {"name": q.name, "guaranteed": q.guaranteed.total, "weight": q.weight}
            create_queue(session=s, spec=QueueSpec.model_validate(queue))
        # Running jobs first (they fill the cluster), then the pending ones.
        for j in [r.job for r in snap.running] + list(snap.pending):
            fields: dict[str, object] = {
                "name": j.id, "queue": j.queue, "image": "x", "command": ["c"],
                "workers": j.workers, "cpu": j.cpu_milli / 1000,
                "memory": f"{j.memory_mib}Mi", "priority": j.priority,
            }  # fmt: skip
            if j.gpu > 0:
                fields["gpu"] = j.gpu
            job_spec = JobSpec.model_validate(fields)
            submit_job(session=s, spec=job_spec, submitter="b", now=as_datetime(now))


def loop(args: argparse.Namespace) -> None:
    # Imported here: the core part needs no store.
    from scheduler.backends.sim import SimBackend
    from scheduler.clock import VirtualClock
    from scheduler.loop.service import Loop, LoopConfig
    from scheduler.store.db import open_database

    snap = cluster(args.nodes, args.pending)
    # --state DIR keeps the store and the sim backend after the warm-up cycles, so that
    # a rerun starts from the steady state (the first cycles launch ~9,000 jobs: minutes).
    state = Path(args.state) if args.state else Path(tempfile.mkdtemp(prefix="cycle_scale-"))
    state.mkdir(parents=True, exist_ok=True)
    saved = state / "sim.pickle"
    fresh = not saved.exists()
    if fresh:
        (state / "s.db").unlink(missing_ok=True)
    db = open_database(f"sqlite:///{state / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(snap.nodes, clock, default_duration_s=1e9)
    if not fresh:
        clock.t, backend.attempts = pickle.loads(saved.read_bytes())
    lp = Loop(db, backend, clock=clock, config=LoopConfig(holder="b", lease_ttl_s=1e9))
    w = sys.stdout.write
    t = time.perf_counter()
    if fresh:
        _submit(db, snap, clock.now())
        w(f"\nloop: submitted {len(snap.running) + len(snap.pending)} jobs in "
          f"{time.perf_counter() - t:.1f} s\n")  # fmt: skip
    for c in range(args.warm if fresh else 1):
        clock.advance_to(clock.now() + 1.0)
        t = time.perf_counter()
        report = lp.run_once()
        placed = len(report.result.places) if report else 0
        w(f"warm-up cycle {c}: {time.perf_counter() - t:.1f} s, placed {placed}\n")
    if fresh and args.state:
        saved.write_bytes(pickle.dumps((clock.t, backend.attempts)))
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    change = _churn(db, backend, clock, args.churn)
    reports, cpus = _timed_cycles(lp, clock, args.cycles, args.loop_profile, change)
    _write_steps(reports, cpus, args.cycles)


def _churn(
    db: object, backend: SimBackend, clock: VirtualClock, fraction: float
) -> Callable[[int], None]:
    """Before timed cycle `c`: `fraction` of the running jobs end and as many new
    one-GPU jobs arrive (seeded), so the cluster stays at its steady state."""
    from scheduler.clock import as_datetime
    from scheduler.spec import JobSpec
    from scheduler.store.db import Database
    from scheduler.store.submission import submit_job

    assert isinstance(db, Database)
    rng = random.Random(7)

    def change(c: int) -> None:
        now = clock.now()
        running = [a for a in backend.attempts.values() if a.ends() > now]
        k = round(fraction * len(running))
        for a in rng.sample(running, k):
            a.duration = now - a.started
        with db.session() as s:
            for i in range(k):
                spec = JobSpec.model_validate({
                    "name": f"x{c}-{i}", "queue": f"q{i % QUEUES}", "image": "x",
                    "command": ["c"], "gpu": 1, "cpu": 4, "memory": "32Gi"})  # fmt: skip
                submit_job(session=s, spec=spec, submitter="b", now=as_datetime(now))

    return change


def _timed_cycles(
    lp: Loop,
    clock: VirtualClock,
    cycles: int,
    profile: str | None,
    change: Callable[[int], None],
) -> tuple[list[CycleReport], list[float]]:
    """`cycles` loop cycles a virtual second apart, each after `change`: their reports
    and CPU seconds."""
    reports, cpus = [], []
    prof = cProfile.Profile() if profile else None
    for c in range(cycles):
        clock.advance_to(clock.now() + 1.0)
        change(c)
        if prof:
            prof.enable()
        cpu = time.process_time()
        report = lp.run_once()
        cpus.append(time.process_time() - cpu)
        if prof:
            prof.disable()
        assert report is not None
        reports.append(report)
    if prof and profile:
        prof.dump_stats(profile)
    return reports, cpus


def _write_steps(reports: list[CycleReport], cpus: list[float], cycles: int) -> None:
    """The steady state, and each step's median and minimum, as a Markdown table."""
    w = sys.stdout.write
    last = reports[-1]
    assert last.snapshot is not None
    pods = sum(len(r.placements) for r in last.snapshot.running)
    w(f"steady: {len(last.snapshot.running)} running jobs ({pods} pods), "
      f"{len(last.snapshot.pending)} pending, {cycles} cycles\n\n")  # fmt: skip
    w("| step | median ms | min ms |\n|---|---|---|\n")
    for step in last.steps:
        secs = [r.steps[step] for r in reports]
        w(f"| {step} | {statistics.median(secs) * 1e3:.0f} | {min(secs) * 1e3:.0f} |\n")
    total = [r.seconds for r in reports]
    w(f"| cycle | {statistics.median(total) * 1e3:.0f} | {min(total) * 1e3:.0f} |\n")
    w(f"| cycle, CPU | {statistics.median(cpus) * 1e3:.0f} | {min(cpus) * 1e3:.0f} |\n")
    own = [r.seconds - r.steps["schedule"] for r in reports]
    core = [r.steps["schedule"] for r in reports]
    ratio = statistics.median(o / c for o, c in zip(own, core, strict=True))
    looked = statistics.median(r.cache.looked_at for r in reports)
    w(f"\nloop's own work (all but the core's schedule): median "
      f"{statistics.median(own) * 1e3:.0f} ms = {ratio:.2f} x the core's; "
      f"jobs reconciled per cycle: median {looked:.0f}\n")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of the core cycles here")
    ap.add_argument("--loop", action="store_true", help="also time the loop on the sim backend")
    ap.add_argument("--warm", type=int, default=2, help="loop cycles before timing")
    ap.add_argument("--cycles", type=int, default=3, help="loop cycles timed")
    ap.add_argument("--loop-profile", help="write a cProfile of the timed loop cycles here")
    ap.add_argument("--skip-core", action="store_true")
    ap.add_argument("--state", help="loop: keep/reuse the store and sim backend here")
    ap.add_argument("--gc-threshold", type=int, help="loop: gen-0 GC threshold while timed")
    ap.add_argument("--churn", type=float, default=0.01,
                    help="loop: share of running jobs that end (and arrive) per cycle")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.skip_core:
        core(args, sys.stdout)
    if args.loop:
        loop(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
