"""The cost of one scheduling cycle against cluster size (issue 39, part 4).

    nice .venv/bin/python -m bench.cycle_curve --nodes 1000,2000,5000,10000,20000 \
        --plot docs/img/cycle-curve.png

Each size runs in a process of its own (its peak RSS is its own): `bench.cycle_scale`'s
cluster (8 GPUs a node, ~9.5 pods a node running over 8 queues, half as many pending
jobs as nodes, none past the starvation time unless `--starving`), one warm-up cycle,
then `--repeat` cycles of the pure core (`cycle.schedule`), each step timed as
`bench.cycle_scale` times it. The core keeps nothing between cycles: every cycle
rebuilds its state from every running job, so what a cycle costs follows the cluster's
size whatever changed since the last one (churn enters through the loop, measured by
`bench.cycle_scale --loop --churn`).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.cycle_scale import GPUS, cluster, core_steps

STEPS = ("context (whole)", "invariants", "ordering", "admission", "preemption")


def one(nodes: int, repeat: int, starving: int = 0) -> dict[str, Any]:
    """One size, measured in this process."""
    snap = cluster(nodes, nodes // 2, starving)
    pods = sum(len(r.placements) for r in snap.running)
    steps: dict[str, list[float]] = {}
    core_steps(snap, steps)  # warm-up
    steps.clear()
    for _ in range(repeat):
        core_steps(snap, steps)
    med = {k: statistics.median(v) for k, v in steps.items()}
    return {
        "nodes": nodes,
        "gpus": nodes * GPUS,
        "running": len(snap.running),
        "pods": pods,
        "pending": len(snap.pending),
        "starving": starving,
        "cycle_s": med["schedule (whole)"],
        "steps_s": {k: med[k] for k in STEPS},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = "| nodes (GPUs) | running jobs (pods) | pending (starving) | cycle, CPU s | "
    head += " | ".join(STEPS) + " | s per 1,000 pods | peak RSS MiB |\n"
    out = head + "|" + "---|" * (len(STEPS) + 6) + "\n"
    for r in rows:
        steps = " | ".join(f"{r['steps_s'][k]:.2f}" for k in STEPS)
        starving = min(r["starving"], r["pending"])
        out += (
            f"| {r['nodes']:,} ({r['gpus']:,}) | {r['running']:,} ({r['pods']:,}) | "
            f"{r['pending']:,} ({starving:,}) | {r['cycle_s']:.2f} | {steps} | "
            f"{1000 * r['cycle_s'] / r['pods']:.3f} | {r['peak_rss_mib']:.0f} |\n"
        )
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    from matplotlib import pyplot as plt

    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
    xs = [r["nodes"] for r in rows]
    ax.plot(xs, [r["cycle_s"] for r in rows], marker="o", linewidth=2, label="cycle (whole)")
    for k in STEPS:
        ax.plot(xs, [r["steps_s"][k] for r in rows], marker=".", linewidth=1, label=k)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.text(xs[0], 1.03, "1 s interval", color="grey", fontsize=8)
    ax.set_xlabel("nodes (8 GPUs each, ~9.5 pods a node)")
    ax.set_ylabel("CPU seconds per cycle")
    ax.set_title("The core's cycle against cluster size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    mem.plot(xs, [r["peak_rss_mib"] for r in rows], marker="o")
    mem.set_xlabel("nodes")
    mem.set_ylabel("peak RSS (MiB), one process per size")
    mem.set_title("Memory")
    mem.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="1000,2000,5000,10000,20000")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--plot", help="write the curve here (PNG)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--starving", type=int, default=0,
                    help="pending jobs past their starvation time (each seeks room)")  # fmt: skip
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a size, in this process
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.repeat, args.starving)))
        return 0
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        cmd = [sys.executable, "-m", "bench.cycle_curve", "--one", str(n), "--starving"]
        done = subprocess.run([*cmd, str(args.starving), "--repeat", str(args.repeat)], check=True,
                              capture_output=True, text=True)  # fmt: skip
        rows.append(json.loads(done.stdout))
        print(f"{n} nodes: {rows[-1]['cycle_s']:.2f} s", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.plot:
        plot(rows, Path(args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
