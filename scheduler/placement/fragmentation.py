"""GPU fragmentation of a node with respect to a workload (FGD, USENIX ATC '23).

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent". For a node n and a task type m, the fragment F_n(m)
is the free GPU share on n that m cannot use:

- if m cannot run on n at all (it asks for no GPU, its GPU type is not n's, n lacks
  the CPU or memory, or no GPUs on n have enough free share), every free share of n
  is a fragment;
- otherwise the free share of each GPU with less free than m asks of one GPU
  (min(request, 1)) is a fragment.

A workload M is a distribution of task types (their popularity); the node's
fragmentation is the expectation F_n(M) = sum_m p_m F_n(m). `fgd` places a task where
F_n(M) grows least.

Computed fast by factoring: with `free` the node's free share, F_n(m) = free - U_m,
where U_m (the share m could use) is 0 when m cannot run and otherwise the free share
of the GPUs holding at least m's per-GPU request. U depends on the GPUs alone and the
"can run" on CPU and memory alone, so F_n(M) = free - sum over GPU shapes s of
R_s(cpu, mem) * U_s(gpus), with R_s the popularity of the shape's task types that fit
the free CPU and memory. R and U are memoised per GPU model (R under the count of the
mix's distinct CPU and memory requests the node covers), and so is F.

Beyond the paper: F_n(M) looks one task ahead, so a CPU-only task that leaves a node
with enough CPU for any single task of the mix costs nothing in F, even when the node
keeps too little CPU (or memory) for the tasks that would fill its free GPUs. `score`
adds that lookahead, the *stranded* share: S_n = max(0, free - min(cpu / c, mem / r)),
with c and r the CPU and memory per GPU of the mix's GPU tasks that can run on the
node's model (popularity-weighted). `fgd` minimises the growth of F_n(M) + S_n.

Also beyond the paper: the product's `fgd` weighs each task type by its popularity
times its scarcity (`WorkloadMix.on`, `Supply`): the cluster's GPUs over the GPUs of
the nodes that could host it. With popularity alone, the nodes of a rare GPU model
(or the few nodes big enough for the largest tasks) look already fragmented to every
type that cannot run there, so FGD fills them first with tasks that could run anywhere.
Those weights are those of the empty cluster; for the task types that take most of a
node (`Supply.whole_node`), whose hosts are the nodes still (almost) empty, the weight
doubles each time their empty hosts halve (`WorkloadMix.on`'s `depleted`), so that the
last empty hosts of the largest tasks are not opened late in a fill by tasks that could
have gone elsewhere.
"""

from __future__ import annotations

import bisect
import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler import model as m
from scheduler.placement import fit
from scheduler.placement.undo import UndoLog

_MEMO_LIMIT = 500_000  # entries before the memo is dropped (long-lived services)


class _Shape:
    """The mix's task types of one GPU shape on one GPU model."""

    def __init__(self, need: fit.Need) -> None:
        self.need = need
        self.members: list[tuple[int, int, float]] = []  # (cpu level, mem level, p)


class WorkloadMix:
    """Task types with their popularity (normalised to sum 1); the target workload
    of `fgd`. Identity-hashed: one mix object, one memo."""

    def __init__(self, weights: Mapping[fit.Demand, float]) -> None:
        total = sum(w for w in weights.values() if w > 0)
        if total <= 0:
            raise ValueError("a workload mix needs at least one task type of positive weight")
        self.weights: dict[fit.Demand, float] = {t: w / total for t, w in weights.items() if w > 0}
        self.cpu_levels = sorted({t.cpu_milli for t in self.weights})
        self.mem_levels = sorted({t.memory_mib for t in self.weights})
        self._level = {
            t: (self.cpu_levels.index(t.cpu_milli), self.mem_levels.index(t.memory_mib))
            for t in self.weights
        }
        self._shapes: dict[tuple[str, int], list[_Shape]] = {}
        self._runs: dict[tuple[str, int, int, int], tuple[float, ...]] = {}
        self._usable: dict[tuple[str, int, tuple[int, ...]], tuple[int, ...]] = {}
        self.memo: dict[tuple[object, ...], float] = {}
        self._per_gpu: dict[tuple[str, int], tuple[float, float]] = {}
        # Weight of the stranded share in `score` (0: the paper's FGD exactly).
        self.stranding = 1.0
        # What `score` multiplies F_n(M) by: the weights' sum before they were
        # normalised, for a mix weighted by scarcity (`on`), so that weighting a few
        # scarce types up does not shrink every other type against the stranded share.
        self.scale = 1.0
        # Per-policy score caches keyed by demand (see policies.Fgd); kept here so
        # that they live exactly as long as the mix they depend on.
        self.score_cache: dict[fit.Demand, dict[object, object]] = {}
        # Popularity the stranded share averages CPU and memory per GPU over (a mix
        # weighted by scarcity, `on`, keeps the popularity of the mix it came from).
        self.popularity: Mapping[fit.Demand, float] = self.weights
        self._on: dict[tuple[Supply, Depletion], WorkloadMix] = {}

    @staticmethod
    def from_jobs(jobs: Iterable[m.JobRequest]) -> WorkloadMix:
        """The mix of the given jobs' workers (each worker counts once)."""
        weights: dict[fit.Demand, float] = defaultdict(float)
        for job in jobs:
            weights[fit.Demand.of(job)] += max(job.workers, 1)
        return WorkloadMix(weights)

    def on(self, supply: Supply, depleted: Depletion = ()) -> WorkloadMix:
        """This mix with each task type weighted by its scarcity on the cluster: its
        popularity times the cluster's GPUs over the GPUs of the nodes that could
        host one of it when empty (`Supply.scarcity`). The paper weights popularity
        alone; then a node that fewer task types can run on looks already fragmented
        (every type it cannot run sees all its free share as a fragment), and filling
        it looks free: FGD fills the rare GPU models, and the few nodes big enough for
        the largest tasks, first, with tasks that could have run anywhere. Weighted
        by scarcity, the task types that only a few nodes can serve count in
        proportion to the pressure they put on those nodes. `depleted` names the types
        whose hosts have halved k times since (type, k): their scarcity is 2**k times
        the empty cluster's. Memoised per (supply, depleted)."""
        key = (supply, depleted)
        got = self._on.get(key)
        if got is None:
            boost = dict(depleted)
            scaled = {t: p * supply.scarcity(t) * 2 ** boost.get(t, 0)
                      for t, p in self.weights.items()}  # fmt: skip
            if sum(scaled.values()) <= 0:  # no type runs anywhere: nothing to weigh
                return self
            got = WorkloadMix(scaled)
            got.stranding = self.stranding
            got.scale = self.scale * sum(scaled.values())
            got.popularity = self.popularity
            self._on[key] = got
        return got

    def fragmentation(
        self, model: str, gpu_mem: int, cpu: int, mem: int, shares: tuple[int, ...]
    ) -> float:
        """F_n(M) in share units for a node of this model with these free resources."""
        lc = bisect.bisect_right(self.cpu_levels, cpu)
        lm = bisect.bisect_right(self.mem_levels, mem)
        key = (model, gpu_mem, lc, lm, shares)
        got = self.memo.get(key)
        if got is None:
            if len(self.memo) > _MEMO_LIMIT:
                self.memo.clear()
                self._usable.clear()
            runs = self._runs.get(key[:4])
            if runs is None:
                runs = self._runs[(model, gpu_mem, lc, lm)] = self._runs_of(model, gpu_mem, lc, lm)
            usable = self._usable.get((model, gpu_mem, shares))
            if usable is None:
                usable = self._usable[(model, gpu_mem, shares)] = self._usable_of(
                    model, gpu_mem, shares
                )
            got = sum(shares) - sum(map(operator.mul, runs, usable))
            self.memo[key] = got
        return got

    def score(self, model: str, gpu_mem: int, cpu: int, mem: int, shares: tuple[int, ...]) -> float:
        """What `fgd` minimises the growth of: F_n(M) plus the stranded share."""
        frag = self.scale * self.fragmentation(model, gpu_mem, cpu, mem, shares)
        if not self.stranding:
            return frag
        return frag + self.stranding * self.stranded(model, gpu_mem, cpu, mem, shares)

    def stranded(
        self, model: str, gpu_mem: int, cpu: int, mem: int, shares: tuple[int, ...]
    ) -> float:
        """S_n in share units: free GPU share the mix's GPU tasks could not fill for
        lack of CPU or memory, at the mix's CPU and memory per GPU on this model."""
        per = self._per_gpu.get((model, gpu_mem))
        if per is None:
            per = self._per_gpu[(model, gpu_mem)] = self._per_gpu_of(model, gpu_mem)
        cpu_per, mem_per = per
        free = sum(shares)
        room = float(free)
        if cpu_per > 0:
            room = min(room, max(cpu, 0) / cpu_per)
        if mem_per > 0:
            room = min(room, max(mem, 0) / mem_per)
        return free - room

    def _per_gpu_of(self, model: str, gpu_mem: int) -> tuple[float, float]:
        """(milli-CPU, MiB) per share unit of the GPU task types that run on the model."""
        gpus = cpu = mem = 0.0
        for t, p in self.popularity.items():
            n = fit.need(t, model, gpu_mem)
            if n is None or n.gpus == 0:
                continue
            gpus += p * n.gpus * n.share
            cpu += p * t.cpu_milli
            mem += p * t.memory_mib
        return (cpu / gpus, mem / gpus) if gpus else (0.0, 0.0)

    def shapes(self, model: str, gpu_mem: int) -> list[_Shape]:
        """The GPU shapes the mix's GPU tasks take on this model (the rest run nowhere
        there and contribute no usable share)."""
        got = self._shapes.get((model, gpu_mem))
        if got is None:
            by_need: dict[fit.Need, _Shape] = {}
            for t, p in self.weights.items():
                n = fit.need(t, model, gpu_mem)
                if n is None or n.gpus == 0:
                    continue
                shape = by_need.setdefault(n, _Shape(n))
                shape.members.append((*self._level[t], p))
            got = self._shapes[(model, gpu_mem)] = list(by_need.values())
        return got

    def _runs_of(self, model: str, gpu_mem: int, lc: int, lm: int) -> tuple[float, ...]:
        return tuple(
            sum(p for c, mm, p in s.members if c < lc and mm < lm)
            for s in self.shapes(model, gpu_mem)
        )

    def _usable_of(self, model: str, gpu_mem: int, shares: tuple[int, ...]) -> tuple[int, ...]:
        out = []
        for s in self.shapes(model, gpu_mem):
            n = s.need
            out.append(sum(v for v in shares if v >= n.share) if fit.gpu_fits(n, shares) else 0)
        return tuple(out)


Shape = tuple[str, int, int, int, int]  # a node's GPU model, GPU memory, GPUs, CPU, memory
Depletion = tuple[tuple[fit.Demand, int], ...]  # (task type, times its hosts halved)


class Supply:
    """The cluster's nodes by shape, when empty: which task types they can host.
    Hashable by value (equal clusters share derived mixes)."""

    __slots__ = ("_hash", "_key", "_memo", "total")

    def __init__(self, nodes: Iterable[m.Node]) -> None:
        shapes: dict[Shape, int] = defaultdict(int)
        for n in nodes:
            shapes[(n.gpu_model, n.gpu_memory_mib, n.gpu_count, n.cpu_milli, n.memory_mib)] += 1
        self._key = tuple(sorted(shapes.items()))
        self._hash = hash(self._key)
        self._memo: dict[fit.Demand, float] = {}
        self.total = sum(k[2] * c for k, c in self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Supply) and self._key == other._key

    def gpus_for(self, t: fit.Demand) -> int:
        """GPUs on the nodes where one task of type `t` fits when the node is empty."""
        got = 0
        for (model, gpu_mem, gpus, cpu, mem), count in self._key:
            n = fit.need(t, model, gpu_mem)
            if n is None or t.cpu_milli > cpu or t.memory_mib > mem or n.gpus > gpus:
                continue
            got += gpus * count
        return got

    def whole_node(self, t: fit.Demand) -> tuple[tuple[Shape, int], ...]:
        """For a GPU type that takes more than half of every node shape that can host
        it (GPUs, CPU or memory: no two fit on an empty one), its host shapes with
        their node counts; its hosts are the nodes still (almost) empty. Else ()."""
        hosts = []
        for shape, count in self._key:
            model, gpu_mem, gpus, cpu, mem = shape
            n = fit.need(t, model, gpu_mem)
            if n is None or n.gpus == 0 or t.cpu_milli > cpu or t.memory_mib > mem:
                continue
            if n.gpus > gpus:
                continue
            if not (2 * n.gpus > gpus or 2 * t.cpu_milli > cpu or 2 * t.memory_mib > mem):
                return ()
            hosts.append((shape, count))
        return tuple(hosts)

    def scarcity(self, t: fit.Demand) -> float:
        """The cluster's GPUs over those that could host `t` (1: any node; 0: none,
        a type that runs nowhere weighs nothing). CPU-only types count as 1."""
        got = self._memo.get(t)
        if got is None:
            if t.gpu <= 0 and not t.gpu_memory_mib:
                got = 1.0
            else:
                feasible = self.gpus_for(t)
                got = self.total / feasible if feasible else 0.0
            self._memo[t] = got
        return got


class MixLearner:
    """The workload seen so far: the running jobs and each job placement was asked
    about (once per job id), weighted by workers. The mix is rebuilt each time the
    count doubles, then every 4,096 workers, so that its caches live between rebuilds.
    With a `log`, every change is undoable: what a rolled-back trial asked about is
    forgotten again."""

    def __init__(self, log: UndoLog | None = None) -> None:
        self.counts: dict[fit.Demand, float] = defaultdict(float)
        self.ids: set[str] = set()
        self.total = 0
        self._next = 1
        self.mix: WorkloadMix | None = None
        self._log = log

    def add(self, job: m.JobRequest) -> None:
        if job.id not in self.ids:
            if self._log is not None:
                self._log.record(self._restore, job, self.mix, self._next)
            self.ids.add(job.id)
            self.counts[fit.Demand.of(job)] += max(job.workers, 1)
            self.total += max(job.workers, 1)

    def observe(self, job: m.JobRequest, urgent: bool = False) -> WorkloadMix:
        """The mix to place `job` with. `urgent`: a type the mix lacks rebuilds it now
        (a scarce one, whose hosts the mix must keep before the next doubling), and
        leaves the doubling schedule as it was."""
        self.add(job)
        mix = self.mix
        due = mix is None or self.total >= self._next
        if due or (urgent and mix is not None and fit.Demand.of(job) not in mix.weights):
            if self._log is not None:
                self._log.record(self._rebuilt, self.mix, self._next)
            self.mix = WorkloadMix(self.counts)
            if due:
                self._next = self.total * 2 if self.total < 4096 else self.total + 4096
        assert self.mix is not None
        return self.mix

    def _restore(self, job: m.JobRequest, mix: WorkloadMix | None, next_: int) -> None:
        self.ids.discard(job.id)
        task = fit.Demand.of(job)
        self.counts[task] -= max(job.workers, 1)
        if self.counts[task] <= 0:
            del self.counts[task]
        self.total -= max(job.workers, 1)
        self.mix, self._next = mix, next_

    def _rebuilt(self, mix: WorkloadMix | None, next_: int) -> None:
        self.mix, self._next = mix, next_
