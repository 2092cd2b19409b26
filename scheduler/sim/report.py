"""What a replay measured (`SimReport`), and the counting done after each of its cycles."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler import model
from scheduler.loop.service import CycleReport
from scheduler.store.live import LiveJob

EPS = model.EPS  # the core's tolerance: one EPS for every comparison of GPU amounts

# One decision, as the test of fast against every-tick compares them:
# (virtual time, "place" | "preempt" | "succeeded" | "failed", job name, placements).
Decision = tuple[float, str, str, tuple[model.WorkerPlacement, ...]]


@dataclass
class SimReport:
    jobs: int
    placed: int
    finished: int
    never_placed: int
    start: float
    end: float
    cycles: int  # cycles run
    utilisation: list[tuple[float, float]] = field(default_factory=list)  # (t, share)
    # GPUs each queue holds from the matching utilisation sample on.
    usage: list[dict[str, float]] = field(default_factory=list)
    guaranteed: dict[str, float] = field(default_factory=dict)
    delays: dict[str, list[float]] = field(default_factory=dict)
    preemptions: dict[str, int] = field(default_factory=dict)
    violation_s: dict[str, float] = field(default_factory=dict)
    dropped_gpu_types: int = 0
    invariant_reports: dict[str, int] = field(default_factory=dict)  # core's checks, by kind
    skipped_ticks: int = 0  # idle ticks the fast path did not run (each as its last cycle)
    decisions: list[Decision] = field(default_factory=list)
    # Share of the cluster's CPU and memory held, sample by sample (with `utilisation`).
    cpu: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    # Why jobs waited: reason -> job-seconds spent pending with it in all, and the jobs
    # waiting for each at every sample (with `utilisation`); each job's last reason.
    waited: dict[str, float] = field(default_factory=dict)
    waited_at: list[dict[str, float]] = field(default_factory=list)
    last_reason: dict[str, tuple[str, str]] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # reason -> a message of it
    placed_ids: set[str] = field(default_factory=set)
    waiting_s: float = 0.0  # virtual time during which some job waited

    def mean_utilisation(self) -> float:
        return self.mean_of([u for _, u in self.utilisation])

    def mean_of(
        self, series: Sequence[float], lo: float = -math.inf, hi: float = math.inf
    ) -> float:
        """Time-weighted mean of a series sampled with `utilisation`, over [lo, hi)."""
        total, area = 0.0, 0.0
        times = [t for t, _ in self.utilisation]
        for (t0, t1), v in zip(itertools.pairwise(times), series, strict=False):
            span = min(hi, t1) - max(lo, t0)
            if span > 0:
                area += v * span
                total += span
        return area / total if total else 0.0

    def mean_usage(self) -> dict[str, float]:
        """Time-weighted GPUs held per queue."""
        area: dict[str, float] = defaultdict(float)
        total = 0.0
        samples = list(zip(self.utilisation, self.usage, strict=True))
        for ((t0, _), held), ((t1, _), _) in itertools.pairwise(samples):
            for q, g in held.items():
                area[q] += g * (t1 - t0)
            total += t1 - t0
        return {q: area.get(q, 0.0) / total if total else 0.0 for q in self.guaranteed}


def record(
    rep: SimReport,
    report: CycleReport,
    t: float,
    submitted: dict[str, tuple[str, float, str]],
    first_start: dict[str, float],
) -> None:
    """Count one cycle's invariant reports, decisions, preemptions and first starts."""
    for v in report.result.violations:
        rep.invariant_reports[v.kind] = rep.invariant_reports.get(v.kind, 0) + 1
    for kind, ids in (
        ("succeeded", report.reconciled.succeeded),
        ("failed", report.reconciled.failed),
    ):
        rep.decisions.extend((t, kind, submitted[jid][2], ()) for jid in sorted(ids))
    for jid in report.applied.preempted:
        q = submitted[jid][0]
        rep.preemptions[q] = rep.preemptions.get(q, 0) + 1
        rep.decisions.append((t, "preempt", submitted[jid][2], ()))
    where = {p.job_id: p.placements for p in report.result.places}
    for jid in report.applied.placed:
        rep.decisions.append((t, "place", submitted[jid][2], where.get(jid, ())))
        if jid not in first_start:
            first_start[jid] = t
            q, sub, _ = submitted[jid]
            rep.delays.setdefault(q, []).append(t - sub)


def count_violations(
    rep: SimReport,
    waiting: Sequence[LiveJob],
    held: dict[str, float],
    guaranteed: dict[str, float],
    step: float,
) -> None:
    """Add `step` seconds to each queue with a pending job that fits in its guarantee while it
    holds less than that and another queue holds more than its own."""
    if step <= 0:
        return
    over = any(held.get(q, 0.0) > g + EPS for q, g in guaranteed.items())
    if not over:
        return
    for lj in waiting:
        q = lj.request.queue
        need = lj.request.workers * (lj.request.gpu or 1.0)
        if held.get(q, 0.0) + need <= guaranteed.get(q, 0.0) + EPS:
            rep.violation_s[q] = rep.violation_s.get(q, 0.0) + step
            held = {**held, q: float("inf")}  # count each queue once per interval


def label(reason: model.PendingReason) -> str:
    """A pending reason's kind, with what a NoFittingNode was short of when it says."""
    if reason.code is model.ReasonCode.NO_NODE and "most_free_cpu_milli" in reason.details:
        return f"{reason.code.value} (CPU or memory)"
    return reason.code.value


def count_waits(
    rep: SimReport, reasons: dict[str, model.PendingReason], waiting: Sequence[str], step: float
) -> None:
    """Charge `step` seconds of waiting to each waiting job's last reason (the cycle's
    word for it), and keep each one's reason in case it is never placed."""
    now: dict[str, float] = defaultdict(float)  # jobs waiting for each reason now
    for job_id in waiting:
        why = reasons.get(job_id)
        kind = label(why) if why is not None else "not looked at yet"
        now[kind] += 1
        rep.waited[kind] = rep.waited.get(kind, 0.0) + step
        if why is not None:
            rep.last_reason[job_id] = (kind, why.message)
            rep.examples.setdefault(kind, why.message)
    rep.waited_at.append(dict(now))
    if waiting:
        rep.waiting_s += step
