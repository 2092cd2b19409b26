"""Placement quality on the Alibaba trace: the FGD paper's workload inflation.

    .venv/bin/python -m bench.fgd_inflation --data ../shared/data/alibaba-gpu-2023 \
        --seeds 3 --out bench/out

Tasks are drawn from the pod list uniformly with replacement, in a seeded order, and
submitted one by one into the empty 1,213-node cluster until the GPUs they ask for
reach 130% of its 6,212 GPUs; a task that does not fit is dropped (there are no
departures). After each task we record the GPU allocation ratio (GPU share held /
capacity) against the arrived GPU requests. FGD's target workload is the pod list's
distribution of task types (`fgd-learned`: the tasks seen so far, the product's
default when no mix is set). Writes `inflation.md`, `inflation.csv` and
`fgd-inflation.png` under `--out`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import plot, trace
from scheduler import placement
from scheduler.placement import baselines, policies

POLICIES = ["fgd", "fgd-learned", "binpack", "spread", "best-fit", "dot-product", "gpu-packing",
            "gpu-clustering", "random"]  # fmt: skip
PACKING = ["best-fit", "dot-product", "gpu-packing", "gpu-clustering", "random"]
STEPS = 131  # 0% .. 130% of capacity, one point per percent


def scorer(name: str, mix: placement.WorkloadMix, seed: int) -> policies.Scorer | str:
    """The policy to run. `fgd` targets the pod list's distribution; `fgd-learned` is
    the product default, the mix the state learns from the tasks it has seen."""
    if name == "fgd-learned":
        return "fgd"
    makers: dict[str, Callable[[], policies.Scorer]] = {
        "fgd": lambda: policies.Fgd(mix),
        "binpack": policies.Binpack,
        "spread": policies.Spread,
        "best-fit": baselines.BestFit,
        "dot-product": baselines.DotProduct,
        "gpu-packing": baselines.GpuPacking,
        "gpu-clustering": baselines.GpuClustering,
        "random": lambda: baselines.RandomFit(seed),
    }
    return makers[name]()


def run(data: Path, policy: str, seed: int, limit_nodes: int | None = None) -> list[float]:
    """Allocation ratio at each arrived percentage 0..130 for one policy and seed."""
    nodes = trace.load_nodes(data)
    pods = trace.load_pods(data)
    if limit_nodes is not None:
        nodes = nodes[:limit_nodes]
    capacity = sum(n.gpu_count for n in nodes)
    state = placement.ClusterState.build(nodes, ())
    score = scorer(policy, trace.mix_of(pods), seed)
    rng = random.Random(seed)
    curve = [0.0] * STEPS
    arrived = held = 0.0
    step, k = 1, 0
    while step < STEPS:
        pod = pods[rng.randrange(len(pods))]
        job = pod.job(f"t{k}")
        k += 1
        arrived += pod.gpus
        got = placement.place_gang(state, job, score, explain=False)
        if isinstance(got, tuple):
            state.allocate(job.id, got)
            held += pod.gpus
        while step < STEPS and arrived >= capacity * step / 100:
            curve[step] = held / capacity
            step += 1
    return curve


def _run(args: tuple[Path, str, int, int | None]) -> tuple[str, int, list[float]]:
    data, policy, seed, limit = args
    return policy, seed, run(data, policy, seed, limit)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=trace.DEFAULT_DATA)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = ap.parse_args(argv)
    names = args.policies.split(",")
    work = [(args.data, p, s, None) for p in names for s in range(args.seeds)]
    curves: dict[str, list[list[float]]] = {p: [] for p in names}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for policy, _, curve in pool.map(_run, work):
            curves[policy].append(curve)
    args.out.mkdir(parents=True, exist_ok=True)
    report = table(curves, args.seeds)
    (args.out / "inflation.md").write_text(report)
    with (args.out / "inflation.csv").open("w") as f:
        f.write("policy,seed," + ",".join(f"a{i}" for i in range(STEPS)) + "\n")
        for p, cs in curves.items():
            for s, c in enumerate(cs):
                f.write(f"{p},{s}," + ",".join(f"{v:.5f}" for v in c) + "\n")
    plot.inflation(curves, args.out / "fgd-inflation.png")
    sys.stdout.write(report)
    return 0


def _ms(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f} ± {100 * sd:.1f}"


def table(curves: dict[str, list[list[float]]], seeds: int) -> str:
    """Markdown: the curve (mean ± sd over seeds) and the unallocated GPUs at 100%."""
    points = [50, 70, 80, 90, 95, 100, 110, 120, 130]
    lines = [f"GPU allocation ratio (%) vs arrived GPU requests (% of capacity), "
             f"mean ± sd over {seeds} seeds", "",
             "| policy | " + " | ".join(f"{p}%" for p in points) + " |",
             "|---|" + "---|" * len(points)]  # fmt: skip
    for name, cs in curves.items():
        cells = [_ms([c[p] for c in cs]) for p in points]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Unallocated GPU requests at 100% arrived (arrived - allocated, % of "
              "capacity) and FGD's reduction against each policy:", "",
              "| policy | unallocated at 100% | FGD leaves fewer by |",
              "|---|---|---|"]  # fmt: skip
    gap = {n: statistics.fmean(1 - c[100] for c in cs) for n, cs in curves.items()}
    for name in curves:
        cut = (
            ""
            if "fgd" not in gap or name == "fgd"
            else f"{100 * (1 - gap['fgd'] / gap[name]):.0f}%"
        )
        lines.append(f"| {name} | {100 * gap[name]:.2f}% | {cut} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
