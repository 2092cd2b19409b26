"""`shoal simulate` on the in-memory store against the same replay on a SQLite file, in
one run: wall and CPU time of each (memory, SQLite, memory again: the machine's drift
shows), the ratio, and whether both made the same decisions (places with their GPUs,
preemptions, ends, at the same virtual times).

    nice .venv/bin/python -m bench.sim_store \\
        ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv \\
        --limit 300 --max-duration 7200 --arrival-scale 0.02

On the default 2 x 4 GPU cluster, the fast path (no `every_tick`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.sim_speed import trace_jobs
from scheduler.backends.local import cluster
from scheduler.sim import replay, trace


def _run(
    jobs: list[trace.TraceJob], scale: float, url: str | None
) -> tuple[replay.SimReport, float, float]:
    w, c = time.perf_counter(), time.process_time()
    rep = replay.simulate(jobs, cluster.load_nodes(), arrival_scale=scale, database_url=url)
    return rep, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    jobs, a = trace_jobs(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            ("memory", *_run(jobs, a.arrival_scale, None)),
            ("sqlite", *_run(jobs, a.arrival_scale, f"sqlite:///{Path(tmp) / 'sim.db'}")),
            ("memory again", *_run(jobs, a.arrival_scale, None)),
        ]
    for name, rep, wall, cpu in runs:
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {rep.cycles} cycles", flush=True)
    (_, mem, mw, mc), (_, sql, sw, sc), (_, _, mw2, mc2) = runs
    print(f"sqlite / memory: {sw / min(mw, mw2):.2f}x wall, {sc / min(mc, mc2):.2f}x CPU")
    same = mem.decisions == sql.decisions and mem.delays == sql.delays and mem.end == sql.end
    print(
        f"decisions: {len(mem.decisions)} in memory, {len(sql.decisions)} on SQLite, "
        f"{'identical' if same else 'DIFFERENT'}; placed {mem.placed}, never placed "
        f"{mem.never_placed}, mean utilisation {mem.mean_utilisation():.1%}"
    )


if __name__ == "__main__":
    main()
