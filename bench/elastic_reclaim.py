"""Reclaim by shrinking (issue 29): the same Alibaba trace replay with and without
elastic jobs, through the real loop and core on the sim backend.

    nice -n 10 .venv/bin/python -m bench.elastic_reclaim \\
        ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv [--json]

The mix: from `--start` (trace seconds; default: the first multi-GPU job) on, every
multi-GPU job of the trace and every `--dev-every`-th single-GPU one (whole or shared),
`--limit` in all, durations capped at `--max-duration`, arrivals times
`--arrival-scale`. Two queues on `--nodes` nodes of 8 GPUs: `dev` (the single-GPU jobs,
guaranteed `--dev-share` of the GPUs) and `train` (the multi-GPU ones, the rest). Reclaim
happens because train's demand is far above its guarantee while dev's comes in bursts
(the trace's own arrivals): train borrows dev's idle GPUs, then dev's next burst comes
back for its guarantee. Rigid run: a job of G GPUs is G workers of 1 GPU (not the trace's
one worker of G GPUs, so both runs place the same shapes). Elastic run: `--elastic` of
the multi-GPU jobs (drawn with `--seed`) are `workers: {min: 1, max: G}` of 1 GPU; the
rest as in the rigid run. The sim's work of a job is its traced duration at G workers
(`SimBackend.sizes`), each resize a `--restart` s stop (checkpoint kept); a preempted
attempt restarts from zero.

Measured per run: GPU-hours lost to preemption (GPU-seconds each preempted attempt held
until its stop), shrinks' and grows' restart cost (restart x workers after it),
guarantee-restore time (from a cycle where a queue holds less than its guarantee with a
pending job that fits inside it to the first where it holds min(guarantee, held +
pending GPUs); over all episodes and those that waited), job completion time (submit to
success) in all and per kind (`dev`; `multi`: rigid in both runs; `drawn`: elastic in
the elastic run), makespan (first submit to last success). `--every-tick`: no fast path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from scheduler import model as m
from scheduler.clock import VirtualClock, as_datetime
from scheduler.loop.config import CycleReport
from scheduler.sim import replay, trace
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec
from scheduler.store.memory import MemoryStore

EPS = m.EPS
KINDS = ("dev", "multi", "drawn")


def mix(jobs: Sequence[trace.TraceJob], a: argparse.Namespace) -> list[trace.TraceJob]:
    """The multi-GPU jobs from `--start` on (queue `train`) with every `--dev-every`-th
    single-GPU one (queue `dev`)."""
    start = a.start if a.start is not None else min(j.submit for j in jobs if j.gpu >= 2)
    out: list[trace.TraceJob] = []
    singles = 0
    for j in jobs:
        if j.submit < start or (a.limit is not None and len(out) >= a.limit):
            continue
        singles += j.gpu < 2
        if j.gpu >= 2 or singles % a.dev_every == 0:
            q = "train" if j.gpu >= 2 else "dev"
            out.append(dataclasses.replace(j, queue=q, gpu_type=(), priority=None))
    return out


def spec(j: trace.TraceJob, elastic: bool) -> JobSpec:
    """A multi-GPU job as G workers of 1 GPU (`{min: 1, max: G}` when elastic)."""
    g = round(j.gpu) if j.gpu >= 2 else 1
    workers: Any = {"min": 1, "max": g} if elastic else g
    size = {"gpu": 1.0 if g > 1 else j.gpu, "workers": workers}
    each = {"cpu": f"{max(1, j.cpu_milli // g)}m", "memory": f"{max(1, j.memory_mib // g)}Mi"}
    what = {"name": j.name, "queue": j.queue, "image": "sim", "command": ["sim"]}
    return JobSpec.model_validate({**what, **size, **each})


class _Run(replay._Run):
    """`shoal simulate`'s replay, its jobs submitted as `spec` makes them."""

    elastic: set[str]

    def arrive(self, t: float) -> bool:
        arrived = False
        while self.i < len(self.jobs) and self.base_t + self.jobs[self.i].submit <= t:
            job = self.jobs[self.i]
            js = spec(job, job.name in self.elastic)
            job_id = f"{self.i:016x}"
            self.doors.submit(js, job_id=job_id, now=as_datetime(t), by="sim")
            self.backend.durations[job_id] = job.duration
            self.backend.sizes[job_id] = js.max_workers  # the duration's size: G
            self.submitted[job_id] = (js.queue, t, js.name)
            self.i += 1
            arrived = True
        return arrived


@dataclass
class Watch:
    """What the `observe` hook gathers from each cycle. Jobs fall in three kinds: `dev`,
    `multi` (multi-GPU, rigid in both runs), `drawn` (elastic in the elastic run)."""

    run: _Run
    guaranteed: dict[str, float]
    drawn: set[str]
    restart_s: float
    count: Counter[str] = field(default_factory=Counter)
    gpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    below_since: dict[str, float] = field(default_factory=dict)
    restore: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    done: dict[str, float] = field(default_factory=dict)  # job id -> success time

    def kind(self, jid: str) -> str:
        queue, _, name = self.run.submitted[jid]
        return "drawn" if name in self.drawn else "multi" if queue == "train" else "dev"

    def __call__(self, report: CycleReport) -> None:
        t, attempts = report.now, self.run.backend.attempts
        for jid in report.applied.preempted:
            self.count[f"preempted {self.kind(jid)}"] += 1
            for (k, _), a in attempts.items():
                if k == jid and a.stopped_at is not None and a.stopped_at >= t:
                    self.gpu_s[f"lost {self.kind(jid)}"] += a.held_gpu_s(t)
        for jid in report.applied.resized:
            for (k, _), a in attempts.items():
                if k == jid and a.resized and a.resized[-1][0] == t:
                    _, before, after = a.resized[-1]
                    what = "shrink" if after < before else "grow"
                    self.count[what] += 1
                    self.gpu_s[what] += self.restart_s * after
        for jid in report.reconciled.succeeded:
            self.done[jid] = t
        if report.snapshot is not None:
            self.restores(t, report.snapshot)

    def restores(self, t: float, snap: m.Snapshot) -> None:
        held: dict[str, float] = defaultdict(float)
        for r in snap.running:
            held[r.job.queue] += sum(p.gpus_held for p in r.placements)
        need: dict[str, list[float]] = defaultdict(list)
        for j in snap.pending:
            need[j.queue].append(j.workers * j.gpu)
        for q, g in self.guaranteed.items():
            demand = held[q] + sum(need[q])
            since = self.below_since.get(q)
            if since is not None and held[q] >= min(g, demand) - EPS:
                self.restore[q].append(t - since)
                del self.below_since[q]
            elif (
                since is None and held[q] < g - EPS and any(held[q] + n <= g + EPS for n in need[q])
            ):
                self.below_since[q] = t


def _q(xs: Sequence[float], p: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 1) if xs else None


def run_one(
    jobs: list[trace.TraceJob], elastic: set[str], drawn: set[str], a: argparse.Namespace
) -> dict[str, Any]:
    """One replay with the jobs named in `elastic` elastic; its figures."""
    nodes = [m.Node(f"n{i}", 128_000, 1_048_576, 8, "A100", 81_920) for i in range(a.nodes)]
    gpus = 8.0 * a.nodes
    dev = round(gpus * a.dev_share)
    queues = [
        QueueSpec.model_validate({"name": "dev", "guaranteed": dev}),
        QueueSpec.model_validate({"name": "train", "guaranteed": gpus - dev}),
    ]
    clock = VirtualClock(start=1_700_000_000.0)
    arrivals = sorted(
        (dataclasses.replace(j, submit=j.submit * a.arrival_scale) for j in jobs),
        key=lambda j: (j.submit, j.name),
    )
    wall, cpu = time.perf_counter(), time.process_time()
    config = m.Config(starvation_s=a.starvation)
    run = cast(
        _Run,
        _Run.start(MemoryStore(), arrivals, nodes, clock, queues, config, a.tick, a.every_tick),
    )
    run.backend.restart_s = a.restart
    run.elastic = elastic
    guaranteed = {q.name: float(q.guaranteed.total or 0.0) for q in queues}
    watch = Watch(run, guaranteed, drawn, a.restart)
    run.drive(a.max_cycles, None, watch)
    jct: dict[str, list[float]] = defaultdict(list)
    for jid, t in watch.done.items():
        jct[watch.kind(jid)].append(t - run.submitted[jid][1])
    jct["all"] = [x for v in list(jct.values()) for x in v]
    first = min(s for _, s, _ in run.submitted.values())
    h, n, g = 3600.0, watch.count, watch.gpu_s
    return {
        "jobs": len(jobs),
        "finished": len(watch.done),
        "cycles": run.rep.cycles,
        "cpu_s": round(time.process_time() - cpu, 1),
        "preemptions": {k: n[f"preempted {k}"] for k in KINDS},
        "lost_gpu_h": {k: round(g[f"lost {k}"] / h, 2) for k in KINDS},
        "shrinks": n["shrink"],
        "shrink_restart_gpu_h": round(g["shrink"] / h, 2),
        "grows": n["grow"],
        "grow_restart_gpu_h": round(g["grow"] / h, 2),
        "restore_s": {q: _restore(v) for q, v in sorted(watch.restore.items())},
        "jct_s": {k: {"median": _q(jct[k], 0.5), "p90": _q(jct[k], 0.9)} for k in ("all", *KINDS)},
        "makespan_h": round((max(watch.done.values(), default=first) - first) / h, 2),
        "mean_utilisation": round(run.rep.mean_utilisation(), 3),
        "wall_s": round(time.perf_counter() - wall, 1),
    }


def _restore(v: list[float]) -> dict[str, float | None]:
    waits = [x for x in v if x > 0]
    return {"episodes": len(v), "median": _q(v, 0.5), "p90": _q(v, 0.9), "waited": len(waits),
            "waited_median": _q(waits, 0.5), "waited_p90": _q(waits, 0.9)}  # fmt: skip


def rows(r: dict[str, Any]) -> dict[str, str]:
    """One run's figures as the table's rows."""
    lost, p = r["lost_gpu_h"], r["preemptions"]
    out = {
        "jobs finished; cycles; CPU s": f"{r['finished']} of {r['jobs']}; {r['cycles']}; "
        f"{r['cpu_s']}",
        "preemptions dev/multi/drawn": "/".join(str(p[k]) for k in KINDS),
        "GPU-h lost to preemption (dev/multi/drawn)": f"{sum(lost.values()):.2f} ("
        + "/".join(f"{lost[k]:.2f}" for k in KINDS)
        + ")",
        "shrinks; their restart GPU-h": f"{r['shrinks']}; {r['shrink_restart_gpu_h']:.2f}",
        "grows; their restart GPU-h": f"{r['grows']}; {r['grow_restart_gpu_h']:.2f}",
    }
    for q, e in r["restore_s"].items():
        out[f"restore {q}: episodes, median/p90 s (waited: n, median/p90 s)"] = (
            f"{e['episodes']}, {e['median']}/{e['p90']} "
            f"({e['waited']}, {e['waited_median']}/{e['waited_p90']})"
        )
    for k, e in r["jct_s"].items():
        out[f"JCT {k} median/p90 s"] = f"{e['median']}/{e['p90']}"
    out["makespan h; mean utilisation"] = f"{r['makespan_h']}; {r['mean_utilisation']}"
    return out


def table(out: dict[str, dict[str, Any]]) -> str:
    shown = {name: rows(r) for name, r in out.items()}
    lines = [f"| | {' | '.join(shown)} |", "|---|" + "---|" * len(shown)]
    keys = dict.fromkeys(k for r in shown.values() for k in r)
    return "\n".join(
        [*lines, *(f"| {k} | {' | '.join(r.get(k, '') for r in shown.values())} |" for k in keys)]
    )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--limit", type=int, help="jobs in all (default: every one kept)")
    ap.add_argument("--start", type=float, help="trace seconds (default: first multi-GPU job)")
    ap.add_argument("--dev-every", type=int, default=8, help="keep every K-th single-GPU job")
    ap.add_argument("--max-duration", type=float, default=4 * 3600.0)
    ap.add_argument("--arrival-scale", type=float, default=0.025)
    ap.add_argument("--nodes", type=int, default=4, help="nodes of 8 GPUs")
    ap.add_argument("--dev-share", type=float, default=0.75, help="dev's guaranteed share")
    ap.add_argument("--elastic", type=float, default=0.5, help="share of multi-GPU jobs")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--restart", type=float, default=30.0, help="seconds lost per resize")
    ap.add_argument("--tick", type=float, default=60.0)
    ap.add_argument("--starvation", type=float, default=m.Config().starvation_s)
    ap.add_argument("--max-cycles", type=int, default=200_000)
    ap.add_argument("--every-tick", action="store_true", help="no fast path (slower)")
    ap.add_argument("--only", choices=["rigid", "elastic"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # the core's invariant reports, one line per cycle
    jobs = mix(trace.load(a.trace, max_duration_s=a.max_duration), a)
    multi = sorted(j.name for j in jobs if j.queue == "train")
    chosen = set(random.Random(a.seed).sample(multi, round(len(multi) * a.elastic)))
    span = (jobs[-1].submit - jobs[0].submit) * a.arrival_scale
    offered = sum(j.duration * j.gpu for j in jobs) / max(1.0, span) / (8 * a.nodes)
    print(
        f"mix: {len(jobs)} jobs ({len(multi)} multi-GPU, {len(chosen)} made elastic), "
        f"arrivals over {span / 3600:.1f} h, offered load {offered:.2f} of {8 * a.nodes} GPUs"
    )
    out: dict[str, dict[str, Any]] = {}
    for name in ("rigid", "elastic"):
        if a.only in (None, name):
            out[name] = run_one(jobs, chosen if name == "elastic" else set(), chosen, a)
            print(f"{name}: {out[name]['cycles']} cycles, {out[name]['cpu_s']} s CPU", flush=True)
    print(json.dumps(out, indent=1) if a.json else table(out))


if __name__ == "__main__":
    main()
