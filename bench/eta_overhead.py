"""Does the start-time estimator slow the loop? (issue 29 part 1: "it must not slow the
cycle: the estimate runs beside it, bounded in CPU")

    nice .venv/bin/python -m bench.eta_overhead --nodes 200 --pending 100 --cycles 40

The loop on the sim backend with a SQLite store, `bench.cycle_scale`'s cluster (nodes of
8 GPUs, ~9.5 pods a node, mixed queues, `--pending` jobs waiting) and its churn (1% of
the running jobs end and as many arrive before each cycle, so every cycle has work and
every forecast sees a new state). `--cycles` cycles are timed (wall clock) twice in one
run, alternating blocks of 10: without the estimator, and with it running on its thread
as `shoal serve` runs it (`Estimator.run_forever`), its interval shortened to
`--interval` so that it forecasts throughout, at its default CPU bound (5%: after a
forecast it waits 20 times as long as that took) or at `--cpu-share 1` (no bound: it
forecasts again as soon as the state moved); in its own process, as `shoal serve` runs
it, or on the thread itself (`--on-thread`, where it holds the GIL). Reported: mean and
p90 cycle time of each, their ratio, and the forecasts made and their CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bench.cycle_scale import _churn, _submit, cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.estimator import Estimator, EstimatorConfig
from scheduler.loop.service import Loop, LoopConfig
from scheduler.store.db import open_database

BLOCK = 10


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pending", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=40, help="timed cycles of each kind")
    ap.add_argument("--interval", type=float, default=0.1, help="the estimator's interval (s)")
    ap.add_argument("--cpu-share", type=float, default=0.05, help="its CPU bound (1: none)")
    ap.add_argument("--on-thread", action="store_true", help="forecast on the thread itself")

    args = ap.parse_args(argv)

    snap = cluster(args.nodes, args.pending)
    db = open_database(f"sqlite:///{Path(tempfile.mkdtemp()) / 's.db'}")
    clock = VirtualClock()
    backend = SimBackend(snap.nodes, clock, default_duration_s=1e9)
    lp = Loop(db, backend, clock=clock, config=LoopConfig(holder="b", lease_ttl_s=1e9))
    _submit(db, snap, clock.now())
    for _ in range(2):  # launch what fits
        clock.advance_to(clock.now() + 1.0)
        lp.run_once()
    change = _churn(db, backend, clock, 0.01)
    config = EstimatorConfig(
        interval_s=args.interval, cpu_share=args.cpu_share, subprocess=not args.on_thread
    )
    estimator = Estimator(db, config)
    lp.observers.append(estimator.observe)
    times: dict[bool, list[float]] = {False: [], True: []}
    c = 0
    while len(times[True]) < args.cycles:
        for on in (False, True):
            stop = threading.Event()
            runner = threading.Thread(target=estimator.run_forever, args=(stop,), daemon=True)
            if on:
                runner.start()
            for _ in range(BLOCK):
                clock.advance_to(clock.now() + 1.0)
                change(c)
                c += 1
                t = time.perf_counter()
                lp.run_once()
                times[on].append(time.perf_counter() - t)
                time.sleep(0.05)  # as between cycles: the estimator's thread gets its turn
            stop.set()
            if on:  # one run_forever at a time: a late one's close() would end the next's pool
                runner.join()
    w = sys.stdout.write
    for on, label in ((False, "without the estimator"), (True, "with the estimator")):
        xs = sorted(times[on])
        p90 = xs[int(0.9 * (len(xs) - 1))]
        w(f"{label}: {len(xs)} cycles, mean {statistics.mean(xs) * 1000:.1f} ms, "
          f"p90 {p90 * 1000:.1f} ms\n")  # fmt: skip
    ratio = statistics.mean(times[True]) / statistics.mean(times[False])
    w(f"ratio with / without: {ratio:.2f}; forecasts made {estimator.runs}, "
      f"the last took {estimator.last_seconds * 1000:.0f} ms CPU\n")  # fmt: skip
    estimator.close()
    db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
