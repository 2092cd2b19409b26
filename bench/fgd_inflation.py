"""Placement quality on the Alibaba trace: the FGD paper's workload inflation.

    nice .venv/bin/python -m bench.fgd_inflation --data ../shared/data/alibaba-gpu-2023 \
        --out bench/out            # openb protocol, 10 seeds, 4 pod lists, all policies

Two protocols (`--protocol`):

- `openb` (default): the protocol of the paper's simulator
  (hkust-adsl/kubernetes-scheduler-simulator, `-tune 1.3 --shuffle-pod=true`, seeds
  42..51). The pod list, sorted by name, is shuffled (seeded); then tasks drawn from it
  uniformly with replacement are appended until the GPU requests would pass 130% of
  capacity (its `tuneUpPods`, which compares the running total plus the drawn task's
  per-GPU share with the target). Every task of the list therefore arrives exactly
  once before the first repeat. The curve point at x% is, as in its analysis script,
  the mean allocation over the tasks whose arrival ratio rounds to x%.
- `shoal`: the protocol of the first version of this benchmark: tasks drawn from the
  pod list uniformly with replacement (seeds 0..), the point at x% the allocation when
  arrivals first reach x%.

A task that does not fit is dropped (no departures). Pod lists (`--lists`): the default
one and variants built from it (`bench.variants`: sharing-heavy, multi-GPU-heavy,
GPU-type-constrained). Policies: Shoal's (`fgd` with the pod list's mix weighted by
scarcity on the cluster, as the product weighs it, `fgd-learned` = the product default
with no mix given, `fgd-exact` = the pod list's mix by popularity alone and without the
stranded-share term, as `fgd` was before issue 12, `binpack`, `spread`), `fgd-paper`
(the reference's FGD scorer re-implemented: integer sigmoid score, seeded random ties
between nodes, the pod list's mix) and the paper's baselines. Writes `inflation.md`,
`inflation.csv` and `fgd-inflation.png` under `--out`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import baselines, plot, trace, variants
from bench.fgd_report import DEFAULT_DIGEST, Results, load_published, load_reference, table
from scheduler import model as m
from scheduler import placement
from scheduler.placement import policies
from scheduler.placement.fragmentation import Supply

POLICIES = ["fgd-learned", "fgd", "fgd-exact", "fgd-paper", "binpack", "spread", "best-fit",
            "dot-product", "gpu-packing", "gpu-clustering", "random"]  # fmt: skip
STEPS = 131  # 0% .. 130% of capacity, one point per percent
TUNE = 1.3
OPENB_SEEDS = 42  # the reference's seeds are 42..51
__all__ = ["table"]  # the report lives in bench.fgd_report


def scorer(
    name: str, pods: Sequence[trace.Pod], seed: int, nodes: Sequence[m.Node] = ()
) -> policies.Scorer | str:
    """The policy to run. `fgd` targets the pod list's distribution; `fgd-learned` is
    the product default, the mix the state learns from the tasks it has seen."""
    if name == "fgd-learned":
        return "fgd"
    makers: dict[str, Callable[[], policies.Scorer]] = {
        "fgd": lambda: policies.Fgd(trace.mix_of(list(pods)).on(Supply(nodes))),
        "fgd-exact": lambda: policies.Fgd(_paper_score(trace.mix_of(list(pods)))),
        "fgd-paper": lambda: baselines.PaperFgd(baselines.typical_mix(p.task for p in pods), seed),
        "binpack": policies.Binpack,
        "spread": policies.Spread,
        "best-fit": baselines.BestFit,
        "dot-product": baselines.DotProduct,
        "gpu-packing": baselines.GpuPacking,
        "gpu-clustering": baselines.GpuClustering,
        "random": lambda: baselines.RandomFit(seed),
    }
    return makers[name]()


def _paper_score(mix: placement.WorkloadMix) -> placement.WorkloadMix:
    mix.stranding = 0.0  # F_n(M) alone: Shoal's `fgd` before issue 12
    return mix


def openb_order(pods: Sequence[trace.Pod], capacity: int, seed: int) -> list[trace.Pod]:
    """The reference's task order: the list shuffled, then tuned up to 130%."""
    rng = random.Random(seed)
    ordered = sorted(pods, key=lambda p: p.name)
    base = list(ordered)
    rng.shuffle(base)
    milli = [_milli(p) for p in base]
    total, target = sum(milli), TUNE * capacity * 1000
    while total > target and base:  # tuneDownPods
        i = rng.randrange(len(base))
        total -= milli.pop(i)
        base.pop(i)
    while True:  # tuneUpPods: its test uses the drawn task's per-GPU share
        p = ordered[rng.randrange(len(ordered))]
        per_gpu = _milli(p) if p.gpus < 1 else (1000 if p.gpus > 0 else 0)
        if total + per_gpu > target:
            break
        total += _milli(p)
        base.append(p)
    return base


def _milli(p: trace.Pod) -> int:
    return round(p.gpus * 1000)


def shoal_order(pods: Sequence[trace.Pod], capacity: int, seed: int) -> list[trace.Pod]:
    """Uniform draws with replacement until the requests reach 130% of capacity."""
    rng = random.Random(seed)
    out, arrived = [], 0.0
    while arrived < TUNE * capacity:
        p = pods[rng.randrange(len(pods))]
        out.append(p)
        arrived += p.gpus
    return out


def run(
    data: Path,
    policy: str,
    seed: int,
    limit_nodes: int | None = None,
    *,
    pod_list: str = "default",
    protocol: str = "shoal",
) -> list[float]:
    """Allocation ratio at each arrived percentage 0..130 for one policy and seed."""
    nodes = trace.load_nodes(data)
    if limit_nodes is not None:
        nodes = nodes[:limit_nodes]
    pods = variants.load(pod_list, data, nodes)
    capacity = sum(n.gpu_count for n in nodes)
    state = placement.ClusterState.build(nodes, ())
    score = scorer(policy, pods, seed, nodes)
    order = (openb_order if protocol == "openb" else shoal_order)(pods, capacity, seed)
    arrived = held = 0.0
    events: list[tuple[float, float]] = []  # (arrived, held) after each task
    for k, pod in enumerate(order):
        job = pod.job(f"t{k}")
        arrived += pod.gpus
        got = placement.place_gang(state, job, score, explain=False)
        if isinstance(got, tuple):
            state.allocate(job.id, got)
            held += pod.gpus
        events.append((arrived / capacity, held / capacity))
    return (discrete_curve if protocol == "openb" else first_reach_curve)(events)


def first_reach_curve(events: Sequence[tuple[float, float]]) -> list[float]:
    curve, step = [0.0] * STEPS, 1
    for arrived, held in events:
        while step < STEPS and arrived >= step / 100 - 1e-12:
            curve[step] = held
            step += 1
    for s in range(step, STEPS):  # arrivals stopped short (openb's tune stops at 130%)
        curve[s] = events[-1][1] if events else 0.0
    return curve


def discrete_curve(events: Sequence[tuple[float, float]]) -> list[float]:
    """The reference's analysis: mean allocation over events whose arrival ratio rounds
    to x%, else over x-1..x+1%, else carried over from the point before."""
    buckets: dict[int, list[float]] = {}
    for arrived, held in events:
        buckets.setdefault(round(100 * arrived), []).append(held)
    curve = [0.0] * STEPS
    for x in range(STEPS):
        got = buckets.get(x) or [v for d in (-1, 0, 1) for v in buckets.get(x + d, [])]
        curve[x] = statistics.fmean(got) if got else (curve[x - 1] if x else 0.0)
    return curve


def ceiling(
    data: Path, seed: int, *, pod_list: str = "default", protocol: str = "openb"
) -> list[float]:
    """The curve of a policy that places every task: the arrivals themselves, bucketed
    as `run` buckets allocations. Where a policy's curve equals it, it has dropped
    nothing; what is left of its gap to the paper's curve there is the order of
    arrivals (ours is drawn with Python's random numbers, the reference's with Go's)."""
    nodes = trace.load_nodes(data)
    pods = variants.load(pod_list, data, nodes)
    capacity = sum(n.gpu_count for n in nodes)
    order = (openb_order if protocol == "openb" else shoal_order)(pods, capacity, seed)
    events, arrived = [], 0.0
    for pod in order:
        arrived += pod.gpus
        events.append((arrived / capacity, arrived / capacity))
    return (discrete_curve if protocol == "openb" else first_reach_curve)(events)


Task = tuple[Path, str, str, int, str]


def _run(args: Task) -> tuple[str, str, int, list[float]]:
    data, pod_list, policy, seed, protocol = args
    return pod_list, policy, seed, run(data, policy, seed, pod_list=pod_list, protocol=protocol)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=trace.DEFAULT_DATA)
    ap.add_argument("--protocol", choices=["openb", "shoal"], default="openb")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument(
        "--lists",
        default=",".join(variants.DEFAULT_LISTS),
        help="built lists (see bench.variants), `all`, or pod list .csv files",
    )
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--plot", type=Path, default=None, help="also write the figure here")
    args = ap.parse_args(argv)
    names = args.policies.split(",")
    lists = list(variants.ALL_LISTS) if args.lists == "all" else args.lists.split(",")
    first = OPENB_SEEDS if args.protocol == "openb" else 0
    seeds = range(first, first + args.seeds)
    work = [(args.data, lst, p, s, args.protocol) for lst in lists for p in names for s in seeds]
    results: Results = {lst: {p: [] for p in names} for lst in lists}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for lst, policy, _, curve in pool.map(_run, work):
            results[lst][policy].append(curve)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {variants.label(lst): r for lst, r in results.items()}
    paths = {variants.label(lst): lst for lst in lists}
    reference, published = _references(args.data, paths, args.protocol)
    ceilings = {lst: [ceiling(args.data, s, pod_list=paths[lst], protocol=args.protocol)
                      for s in seeds] for lst in reference}  # fmt: skip
    report = table(results, len(seeds), args.protocol, reference, ceilings, published)
    (args.out / "inflation.md").write_text(report)
    with (args.out / "inflation.csv").open("w") as f:
        f.write("pod_list,policy,seed," + ",".join(f"a{i}" for i in range(STEPS)) + "\n")
        for lst, by_policy in results.items():
            for p, cs in by_policy.items():
                for s, c in zip(seeds, cs, strict=True):
                    f.write(f"{lst},{p},{s}," + ",".join(f"{v:.5f}" for v in c) + "\n")
    for path in (args.out / "fgd-inflation.png", args.plot):
        if path is not None:
            plot.inflation_grid(results, path, reference, args.protocol)
    for lst, cs in ceilings.items():
        if results[lst].get("fgd-learned"):
            gap_path = args.out / f"fgd-gap-{lst}.png"
            plot.gap_to_paper(results[lst]["fgd-learned"], reference[lst], cs, gap_path, lst)
    sys.stdout.write(report)
    return 0


def _references(
    data: Path, paths: dict[str, str], protocol: str
) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """The paper's curves and figures that apply to these lists (openb protocol only).
    The default list's curves apply only to a list whose tasks are the default's."""
    if protocol != "openb":
        return {}, {}
    curves, figures = load_reference(), load_published()
    nodes = trace.load_nodes(data)
    same = {lst: trace.fingerprint(variants.load(path, data, nodes)) == DEFAULT_DIGEST
            for lst, path in paths.items() if lst in curves}  # fmt: skip
    for lst, ok in same.items():
        if not ok:
            sys.stderr.write(f"{lst}: not the shared default list; no paper curve for it\n")
    return ({lst: curves[lst] for lst, ok in same.items() if ok},
            {lst: figures[lst] for lst in paths if lst in figures})  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
