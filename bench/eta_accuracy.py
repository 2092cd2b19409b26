"""How far the start-time forecast (`scheduler.core.forecast`, issue 29) is from when
jobs really start, on a replay of the Alibaba trace through the real loop.

    nice -n 10 .venv/bin/python -m bench.eta_accuracy \\
        ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv \\
        --limit 300 --max-duration 7200 --arrival-scale 0.02 --every 10

`shoal simulate`'s replay (default 2 x 4 GPU cluster, one queue per trace QoS class)
with an `observe` hook: every `--every` cycles the loop's own snapshot is forecast
twice, with two runtime callbacks: "oracle", the trace's true durations (what declared
maxRuntimes that are exact would give), and "median", `RuntimeModel` over the jobs
finished so far in the replay (runtime = end cycle - last start). Each pending job's
estimate is later held against its actual start (its first placement after the
estimate). Reported per variant: |error| / wait (wait = actual start - estimate time,
jobs with wait > 0), |error| in minutes, the shares too early and too late, the share
"unknown" and why, the error of estimates made after the last arrival (the replay's
own fidelity: later arrivals are the one thing it cannot know), and the forecast's CPU
time per call next to the cycle's. `--scale NODES` instead times one forecast on
`bench.cycle_scale`'s large snapshot.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scheduler import model as m
from scheduler.backends.local import cluster
from scheduler.core import cycle, forecast
from scheduler.loop.config import CycleReport
from scheduler.sim import replay, trace


@dataclass
class _Variant:
    name: str
    # (job id, time of the estimate, estimated start or None)
    estimates: list[tuple[str, float, float | None]] = field(default_factory=list)
    why_unknown: Counter[str] = field(default_factory=Counter)
    cpu: list[float] = field(default_factory=list)


@dataclass
class _Watch:
    """What the `observe` hook keeps across cycles."""

    durations: dict[str, float]
    every: int
    horizon_s: float
    max_steps: int
    variants: dict[str, _Variant]
    cycles: int = 0
    starts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    last_start: dict[str, float] = field(default_factory=dict)
    requests: dict[str, m.JobRequest] = field(default_factory=dict)
    finished: list[tuple[str, float, int, float]] = field(default_factory=list)
    cycle_cpu: list[float] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (pending, running) sampled

    def __call__(self, report: CycleReport) -> None:
        t, snap = report.now, report.snapshot
        self.cycles += 1
        self.cycle_cpu.append(report.steps.get("schedule", 0.0))
        if snap is not None:
            self.requests.update((j.id, j) for j in snap.pending)
            if snap.pending and self.cycles % self.every == 0:
                self.sample(snap)
        for jid in report.reconciled.succeeded:
            if jid in self.last_start and jid in self.requests:
                j = self.requests[jid]
                self.finished.append((j.queue, j.gpu, j.workers, t - self.last_start.pop(jid)))
        for jid in report.applied.preempted:
            self.last_start.pop(jid, None)
        for jid in report.applied.placed:
            self.starts[jid].append(t)
            self.last_start[jid] = t

    def oracle(self, job: m.JobRequest, elapsed: float) -> tuple[float, str]:
        return self.durations[job.id], "the trace's duration"

    def sample(self, snap: m.Snapshot) -> None:
        self.sizes.append((len(snap.pending), len(snap.running)))
        model = forecast.RuntimeModel(self.finished)
        pairs: list[tuple[_Variant, forecast.Runtime]] = [
            (self.variants["oracle"], self.oracle),
            (self.variants["median"], model),
        ]
        for v, runtime in pairs:
            c = time.process_time()
            got = forecast.forecast(
                snap, runtime, horizon_s=self.horizon_s, max_steps=self.max_steps
            )
            v.cpu.append(time.process_time() - c)
            v.estimates += [(jid, snap.now, e.start_s) for jid, e in got.items()]
            v.why_unknown.update(_kind(e.unknown) for e in got.values() if e.unknown)


def _kind(unknown: str) -> str:
    """An unknown's reason without its particulars: why the replay stopped, whether
    running jobs without a runtime were in the way, and the core's reason code."""
    stop, _, now = unknown.partition(" (the core: ")
    stop = re.sub(r"; \d+ running jobs have no known runtime.*", "; no runtime known", stop)
    stop = re.sub(r"at \+[\d,]+ s", "", stop)
    return f"{stop} [{now.split(':')[0]}]"


def _q(xs: Sequence[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def _report(v: _Variant, starts: dict[str, list[float]], last: float) -> None:
    """Print one variant's figures; `last` is the last arrival's time: estimates made
    after it see every job there will be, so only the replay's own fidelity is left."""
    ratios: list[float] = []
    errors: list[float] = []
    after: list[float] = []
    early = late = now_ok = now_all = unknown = unstarted = 0
    for jid, at, est in v.estimates:
        actual = next((s for s in starts.get(jid, []) if s >= at), None)
        if est is None:
            unknown += 1
            continue
        if actual is None:
            unstarted += 1
            continue
        wait = actual - at
        if wait <= 0:  # placed by the very cycle whose snapshot was forecast
            now_all += 1
            now_ok += est == at
            continue
        errors.append(abs(est - actual))
        ratios.append(abs(est - actual) / wait)
        if at > last:
            after.append(abs(est - actual))
        early += est < actual - 1
        late += est > actual + 1
    n = len(v.estimates)
    print(
        f"{v.name}: {n} estimates, unknown {unknown / n:.1%}, never started {unstarted}; "
        f"placed by that cycle {now_all} ({now_ok} said 'now')"
    )
    print(
        f"  wait > 0: {len(ratios)}; |error|/wait median {_q(ratios, 0.5):.2f}, "
        f"p90 {_q(ratios, 0.9):.2f}; |error| median {_q(errors, 0.5) / 60:.1f} min, "
        f"p90 {_q(errors, 0.9) / 60:.1f} min; too early {early / max(1, len(ratios)):.0%}, "
        f"too late {late / max(1, len(ratios)):.0%}"
    )
    print(
        f"  forecast CPU per call: median {_q(v.cpu, 0.5) * 1e3:.1f} ms, "
        f"p90 {_q(v.cpu, 0.9) * 1e3:.1f} ms, max {max(v.cpu, default=0) * 1e3:.1f} ms "
        f"({len(v.cpu)} calls)"
    )
    print(
        f"  made after the last arrival: {len(after)}, |error| max {max(after, default=0):.0f} s,"
        f" within 1 s {sum(e <= 1 for e in after) / max(1, len(after)):.0%}"
    )
    for kind, count in v.why_unknown.most_common(4):
        print(f"  unknown {count / n:.1%}: {kind}")


def scale(nodes: int, pending: int, max_steps: int) -> None:
    """The forecast's cost on `bench.cycle_scale`'s snapshot (8 GPUs a node, ~9.5 pods a
    node running, `pending` waiting), every job 1-10 h long (fixed per id)."""
    from bench import cycle_scale  # only this mode needs it

    snap = cycle_scale.cluster(nodes, pending)

    def hours(job: m.JobRequest, elapsed: float) -> tuple[float, str]:
        return 3600.0 * (1 + zlib.crc32(job.id.encode()) % 10), "1-10 h by id"

    c = time.process_time()
    cycle.schedule(snap)
    one = time.process_time() - c
    c = time.process_time()
    got = forecast.forecast(snap, hours, max_steps=max_steps)
    spent = time.process_time() - c
    known = sum(e.start_s is not None for e in got.values())
    print(
        f"scale: {nodes} nodes, {len(snap.running)} running, {pending} pending; one cycle "
        f"{one:.2f} s CPU; forecast with max_steps {max_steps}: {spent:.1f} s CPU, "
        f"{known} of {len(got)} pending jobs given a start"
    )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--max-duration", type=float, default=7200.0)
    ap.add_argument("--arrival-scale", type=float, default=0.02)
    ap.add_argument("--every", type=int, default=10, help="forecast every K cycles")
    ap.add_argument("--horizon", type=float, default=7 * 86400.0)
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--scale", type=int, metavar="NODES", help="cost at scale instead")
    ap.add_argument("--pending", type=int, default=500, help="with --scale")
    a = ap.parse_args(argv)
    if a.scale:
        return scale(a.scale, a.pending, a.max_steps)
    jobs = trace.load(a.trace, limit=a.limit, max_duration_s=a.max_duration)
    # The replay's ids: the index in arrival order (submit, name), as `replay.arrive` gives.
    order = sorted(jobs, key=lambda j: (j.submit * a.arrival_scale, j.name))
    durations = {f"{i:016x}": j.duration for i, j in enumerate(order)}
    watch = _Watch(
        durations,
        a.every,
        a.horizon,
        a.max_steps,
        {k: _Variant(k) for k in ("oracle", "median")},
    )
    # `simulate` starts its clock at 1.7e9 on the first arrival.
    last = 1_700_000_000.0 + (order[-1].submit - order[0].submit) * a.arrival_scale
    w, c = time.perf_counter(), time.process_time()
    rep = replay.simulate(jobs, cluster.load_nodes(), arrival_scale=a.arrival_scale, observe=watch)
    spent = time.process_time() - c
    fc = sum(sum(v.cpu) for v in watch.variants.values())
    print(
        f"replay: {len(jobs)} jobs, {rep.cycles} cycles, {rep.placed} placed, "
        f"{time.perf_counter() - w:.0f} s wall, {spent:.1f} s CPU of which forecasts {fc:.1f} s"
    )
    sizes = watch.sizes
    print(
        f"samples: {len(sizes)}; pending per sample median {_q([p for p, _ in sizes], 0.5):.0f}"
        f" max {max((p for p, _ in sizes), default=0)}; running median "
        f"{_q([r for _, r in sizes], 0.5):.0f}; cycle's schedule step median "
        f"{statistics.median(watch.cycle_cpu or [0]) * 1e3:.1f} ms (wall)"
    )
    for v in watch.variants.values():
        _report(v, watch.starts, last)


if __name__ == "__main__":
    main()
