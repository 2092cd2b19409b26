"""Speed of placement and of one scheduling cycle on the Alibaba trace.

    .venv/bin/python -m bench.core_speed --data ../shared/data/alibaba-gpu-2023

1. Placements per second: single-worker tasks drawn (seeded, with replacement) from
   the pod list into the empty 1,213-node openb cluster until their GPU requests
   reach `--fill` of capacity; each is `place_gang` plus `allocate`.
2. One full cycle: 10,000 pending single-worker jobs on 10,000 nodes (the openb
   node list repeated), and again on the 1,213 nodes (over capacity), through
   `scheduler.core.cycle.schedule` when it exists, else through a plain `place_gang`
   loop (and the report says so). Wall and CPU time, then peak Python heap
   (tracemalloc, in a second run, as tracing slows it) and max RSS.
"""

from __future__ import annotations

import argparse
import importlib
import random
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import trace
from scheduler import model as m
from scheduler import placement


def placement_rate(data: Path, policy: str, fill: float, seed: int) -> tuple[int, int, float]:
    """(attempts, placed, CPU seconds) for tasks up to `fill` of capacity."""
    nodes, pods = trace.load_nodes(data), trace.load_pods(data)
    capacity = sum(n.gpu_count for n in nodes)
    state = placement.ClusterState.build(nodes, ())
    state.mix = trace.mix_of(pods)
    rng = random.Random(seed)
    jobs: list[m.JobRequest] = []
    arrived = 0.0
    while arrived < fill * capacity:
        pod = pods[rng.randrange(len(pods))]
        jobs.append(pod.job(f"t{len(jobs)}"))
        arrived += pod.gpus
    placed = 0
    start = time.process_time()  # CPU time: the shared machine's wall clock is noisy
    for job in jobs:
        got = placement.place_gang(state, job, policy)
        if isinstance(got, tuple):
            state.allocate(job.id, got)
            placed += 1
    return len(jobs), placed, time.process_time() - start


def snapshot(data: Path, nodes: int, jobs: int, policy: m.Policy, seed: int) -> m.Snapshot:
    pods = trace.load_pods(data)
    rng = random.Random(seed)
    pending = tuple(_job(pods[rng.randrange(len(pods))], k) for k in range(jobs))
    queue = m.Queue("trace", guaranteed=m.Quota(total=1e9))
    return m.Snapshot(
        nodes=tuple(trace.replicate(trace.load_nodes(data), nodes)),
        queues=(queue,),
        pending=pending,
        config=m.Config(policy=policy),
    )


def _job(pod: trace.Pod, k: int) -> m.JobRequest:
    t = pod.task
    return m.JobRequest(f"j{k}", "trace", gpu=t.gpu, cpu_milli=t.cpu_milli,
                        memory_mib=t.memory_mib, submitted_at=float(k))  # fmt: skip


def _cycle_fn() -> tuple[str, Callable[[m.Snapshot], object]]:
    try:
        cycle = importlib.import_module("scheduler.core.cycle")
        return "scheduler.core.cycle.schedule", cycle.schedule
    except ImportError:
        return "place_gang loop (scheduler.core.cycle not found)", _loop


def _loop(snap: m.Snapshot) -> object:
    state = placement.ClusterState.build(snap.nodes, snap.running)
    state.mix = placement.WorkloadMix.from_jobs(snap.pending)
    placed = 0
    for job in snap.pending:
        got = placement.place_gang(state, job, snap.config.policy)
        if isinstance(got, tuple):
            state.allocate(job.id, got)
            placed += 1
    return placed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=trace.DEFAULT_DATA)
    ap.add_argument("--fill", type=float, default=0.9, help="arrived GPUs / capacity")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-cycle", action="store_true")
    args = ap.parse_args(argv)
    out = sys.stdout
    out.write("| policy | tasks | placed | CPU s | placements/s |\n|---|---|---|---|---|\n")
    for policy in ("fgd", "binpack"):
        tried, placed, secs = placement_rate(args.data, policy, args.fill, args.seed)
        out.write(f"| {policy} | {tried} | {placed} | {secs:.2f} | {tried / secs:,.0f} |\n")
    if args.skip_cycle:
        return 0
    name, fn = _cycle_fn()
    out.write(f"\ncycle: {name}, {args.jobs} pending single-worker jobs\n\n")
    out.write("| nodes | policy | placed | wall s | CPU s | peak heap (MiB) | max RSS (MiB) |\n")
    out.write("|---|---|---|---|---|---|---|\n")
    # The second case is over capacity: most failures are explained with numbers.
    for nodes in (args.nodes, len(trace.load_nodes(args.data))):
        for policy in (m.Policy.FGD, m.Policy.BINPACK):
            snap = snapshot(args.data, nodes, args.jobs, policy, args.seed)
            start, cpu = time.perf_counter(), time.process_time()
            result = fn(snap)
            secs, cpu = time.perf_counter() - start, time.process_time() - cpu
            tracemalloc.start()
            fn(snap)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            placed = len(getattr(result, "places", ())) if not isinstance(result, int) else result
            cells = [
                nodes,
                policy,
                placed,
                f"{secs:.2f}",
                f"{cpu:.2f}",
                f"{peak:.0f}",
                f"{rss:.0f}",
            ]
            out.write("| " + " | ".join(map(str, cells)) + " |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
