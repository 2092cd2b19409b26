"""The FGD paper's baseline schedulers, as scorers, for the benchmarks.

Weng et al. (USENIX ATC '23) compare FGD with these; `bench.fgd_inflation` runs them
on the Alibaba trace. Not product policies, so they live here, outside the scheduler;
importing this module registers the seedless ones by name (`policies.register`).
Lower score is better:

- best-fit: the node with the least weighted free CPU and GPU left after placing;
- dot-product (Tetris-style alignment, as the paper's simulator scores it): the
  node (and GPU) whose free vector, normalised by the node's capacity, has the
  smallest dot product with the task's demand;
- gpu-packing: shared GPUs first, then free GPUs on nodes already in use, then idle
  nodes (the smallest first);
- gpu-clustering: nodes whose tasks all share the task's GPU shape, then nodes that
  have that shape among others, then idle nodes, then the rest; fullest first;
- random-fit: any node that fits, uniformly at random (seeded);
- fgd-paper: the FGD scorer of the paper's simulator, to cross-check the benchmark
  protocol: the node score is int(100 * sigmoid(-change of fragmentation in GPUs)),
  ties between nodes broken by their place in a seeded random order of the nodes,
  fixed for the run (a fresh random choice per placement spreads sharing tasks over
  many GPUs: 13.70% unallocated on the published gpushare80 against the paper's
  10.92%), the target workload its "typical pods" (`typical_mix`).

All pick the least free GPU that fits for a sharing task, except dot-product,
which picks the GPU by its own score.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable

from scheduler.placement import fit, policies
from scheduler.placement.fit import Demand
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.policies import Choice, Feasible, Pick, Scorer, best_fit_take
from scheduler.placement.state import UNIT, ClusterState, Sig, Tag


class BestFit(Scorer):
    name = "best-fit"

    def __init__(self, max_cpu: int = 128_000, max_gpus: int = 8) -> None:
        super().__init__()
        self.max_cpu, self.max_gpus = max_cpu, max_gpus

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        gpu_left = (sum(s.shares) - n.gpus * n.share) / UNIT
        score = 0.5 * (s.cpu - d.cpu_milli) / self.max_cpu + 0.5 * gpu_left / self.max_gpus
        return Choice(score, best_fit_take(n, s.shares))


class DotProduct(Scorer):
    name = "dot-product"

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        cpu = (s.cpu / s.cap_cpu) * (d.cpu_milli / s.cap_cpu) if s.cap_cpu else 0.0
        if n.gpus == 1:
            options = fit.candidates(n, s.shares)
            v = min(options, key=lambda v: (v * n.share, v))
            return Choice((cpu + v * n.share / UNIT**2) / 2, v)
        gpus = len(s.shares)
        gpu = (sum(s.shares) / UNIT / gpus) * (n.gpus / gpus) if gpus and n.gpus else 0.0
        return Choice((cpu + gpu) / 2)


class GpuPacking(Scorer):
    name = "gpu-packing"

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        take = best_fit_take(n, s.shares)
        if n.gpus == 0:
            return Choice(0.0)
        gpus = len(s.shares)
        if all(v == UNIT for v in s.shares):  # idle node: the smallest first
            return Choice(2 + gpus / 100, take)
        if take is not None and take < UNIT:  # a shared GPU: the fullest first
            return Choice(take / UNIT / 2, take)
        return Choice(1 + n.gpus / 100, take)  # fully free GPUs on a node in use


class GpuClustering(Scorer):
    name = "gpu-clustering"

    by_signature = False

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        return Choice(0.0, best_fit_take(n, s.shares))

    def pick(self, state: ClusterState, d: fit.Demand, feasible: Feasible) -> Pick:
        sig, _, r = feasible[0]
        n = fit.need(d, sig.model, sig.gpu_mem)
        if n is None or n.gpus == 0:  # CPU-only work: first fit
            return min((Pick(ms[0], r) for _, ms, r in feasible), key=lambda p: p.node)
        tag = (n.gpus, n.share)
        best: tuple[float, int, Choice] | None = None
        for s, ms, r in feasible:
            packed = sum(s.shares) / UNIT / 100  # in [0, 0.08]: fuller is better
            for i in ms:
                key = (_tier(tag, state.tags[i]) + packed, i, r)
                if best is None or key[:2] < best[:2]:
                    best = key
        assert best is not None
        return Pick(best[1], best[2])


def _tier(tag: Tag, tags: dict[Tag, int]) -> int:
    """0: only this shape; 1: this shape among others; 2: idle; 3: other shapes only."""
    if tag in tags:
        return 0 if len(tags) == 1 else 1
    return 2 if not tags else 3


class RandomFit(Scorer):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    by_signature = False

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        return Choice(0.0, best_fit_take(n, s.shares))

    def pick(self, state: ClusterState, d: fit.Demand, feasible: Feasible) -> Pick:
        k = self.rng.randrange(sum(len(ms) for _, ms, _ in feasible))
        for _, ms, r in feasible:
            if k < len(ms):
                return Pick(ms[k], r)
            k -= len(ms)
        raise AssertionError("unreachable: k is below the total")


def typical_mix(tasks: Iterable[Demand], threshold: float = 0.95) -> WorkloadMix:
    """The reference simulator's target workload: task types without memory (its pod
    resource is CPU, per-GPU share, GPU count and GPU type), the most popular first
    until they cover `threshold` of the tasks (its podPopularityThreshold 95)."""
    counts = Counter(Demand(t.cpu_milli, 0, t.gpu, None, t.gpu_types) for t in tasks)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], _order(kv[0])), reverse=True)
    kept: dict[Demand, float] = {}
    covered = 0
    for t, c in ranked:
        if covered >= threshold * total:
            break
        kept[t] = c
        covered += c
    return WorkloadMix(kept)


def _order(t: Demand) -> tuple[int, int, int, str]:
    whole = t.gpu >= 1
    return (t.cpu_milli, 1000 if whole else round(t.gpu * 1000),
            round(t.gpu) if whole else (1 if t.gpu > 0 else 0), "|".join(t.gpu_types))  # fmt: skip


class PaperFgd(Scorer):
    """FGD as the paper's simulator scores it: an integer score from a sigmoid of the
    fragmentation change, the best GPU by that score, ties between nodes broken by a
    seeded random order of the nodes, fixed for the run."""

    name = "fgd-paper"
    by_signature = False

    def __init__(self, mix: WorkloadMix, seed: int = 0) -> None:
        super().__init__()
        self.mix = mix
        self.rng = random.Random(seed)
        self.rank: list[int] = []  # a node's place in the run's fixed random order

    @staticmethod
    def points(delta: float) -> int:
        """int64(sigmoid((old - new) / 1000) * 100) of the simulator, in share units."""
        x = -delta / UNIT
        return int(100 / (1 + math.exp(-x))) if x > -700 else 0

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        frag = self.mix.fragmentation
        before = frag(s.model, s.gpu_mem, s.cpu, s.mem, s.shares)
        cpu, mem = s.cpu - d.cpu_milli, s.mem - d.memory_mib
        if n.gpus != 1:
            after = frag(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, None))
            return Choice(-self.points(after - before))
        best: Choice | None = None
        for v in reversed(fit.candidates(n, s.shares)):
            after = frag(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, v))
            c = Choice(-self.points(after - before), v)
            if best is None or c.score < best.score:
                best = c
        assert best is not None  # fits: some GPU holds the worker
        return best

    def pick(self, state: ClusterState, d: fit.Demand, feasible: Feasible) -> Pick:
        if len(self.rank) != len(state.nodes):
            order = list(range(len(state.nodes)))
            self.rng.shuffle(order)
            self.rank = [0] * len(order)
            for r, i in enumerate(order):
                self.rank[i] = r
        top = min(r.score for _, _, r in feasible)
        tied = ((min(ms, key=self.rank.__getitem__), r) for _, ms, r in feasible if r.score == top)
        node, choice = min(tied, key=lambda t: self.rank[t[0]])
        return Pick(node, choice)


for _scorer in (BestFit, DotProduct, GpuPacking, GpuClustering):
    policies.register(_scorer.name, policies.per_cycle(_scorer))
