"""`shoal simulate`'s fast path against every tick, in one run: wall and CPU time of each,
the ratio, and whether both made the same decisions (places with their GPUs, preemptions,
ends, all at the same virtual times) and the same summary.

    nice .venv/bin/python -m bench.sim_speed \\
        /work/shared/data/alibaba-gpu-2023/openb_pod_list_default.csv \\
        --limit 300 --max-duration 7200 --arrival-scale 0.02

Runs the fast path first, then the slow one, on the default 2 x 4 GPU cluster.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from scheduler.backends.local import cluster
from scheduler.sim import replay, trace


def _run(
    jobs: list[trace.TraceJob], every_tick: bool, scale: float
) -> tuple[replay.SimReport, float, float]:
    w, c = time.perf_counter(), time.process_time()
    rep = replay.simulate(jobs, cluster.load_nodes(), arrival_scale=scale, every_tick=every_tick)
    return rep, time.perf_counter() - w, time.process_time() - c


def _summary(rep: replay.SimReport) -> tuple[object, ...]:
    return (
        rep.placed,
        rep.finished,
        rep.never_placed,
        rep.end,
        sorted(rep.preemptions.items()),
        {q: sorted(d) for q, d in rep.delays.items()},
        rep.invariant_reports,
    )


def trace_jobs(description: str) -> tuple[list[trace.TraceJob], argparse.Namespace]:
    """The trace's jobs as the command line asks (`trace`, `--limit`, `--max-duration`),
    and the arguments (`--arrival-scale` too)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--max-duration", type=float, default=7200.0)
    ap.add_argument("--arrival-scale", type=float, default=0.02)
    a = ap.parse_args()
    return trace.load(a.trace, limit=a.limit, max_duration_s=a.max_duration), a


def main() -> None:
    jobs, a = trace_jobs(__doc__.splitlines()[0])
    fast, fw, fc = _run(jobs, False, a.arrival_scale)
    print(
        f"fast: {fw:.1f} s wall, {fc:.1f} s CPU, {fast.cycles} cycles "
        f"(+{fast.skipped_ticks} idle ticks skipped)",
        flush=True,
    )
    slow, sw, sc = _run(jobs, True, a.arrival_scale)
    print(f"every tick: {sw:.1f} s wall, {sc:.1f} s CPU, {slow.cycles} cycles", flush=True)
    print(f"ratio: {sw / fw:.1f}x wall, {sc / fc:.1f}x CPU")
    same = fast.decisions == slow.decisions and _summary(fast) == _summary(slow)
    close = all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6)
        for x, y in [
            (fast.mean_utilisation(), slow.mean_utilisation()),
            *(
                (fast.violation_s.get(q, 0.0), slow.violation_s.get(q, 0.0))
                for q in slow.guaranteed
            ),
        ]
    )
    print(
        f"decisions: {len(fast.decisions)} fast, {len(slow.decisions)} every tick, "
        f"{'identical' if same else 'DIFFERENT'}; utilisation and violations "
        f"{'equal' if close else 'DIFFERENT'}; cycles {fast.cycles} + {fast.skipped_ticks} "
        f"skipped {'=' if fast.cycles + fast.skipped_ticks == slow.cycles else '!='} {slow.cycles}"
    )
    print(
        f"placed {fast.placed}, never placed {fast.never_placed}, preemptions "
        f"{sum(fast.preemptions.values())}, mean utilisation {fast.mean_utilisation():.1%}"
    )


if __name__ == "__main__":
    main()
