"""Placement policies: `binpack`, `spread` and `fgd`, each a small scorer, and the
registry that names them.

`gang.best_node` filters once: for each node class (a `state.Sig`) where one worker of
the `fit.Demand` fits (`fit.fits`), it asks the scorer for a `Choice` (lower score
better; for a one-GPU worker, which GPU it takes). As the answer depends on the
signature alone, it is cached per class and each class is scored once; among the best
classes the lowest node index wins, so every choice is deterministic. A scorer whose
choice needs more than the signature (the benchmarks' GPU clustering and random fit)
sets `by_signature = False` and chooses among all feasible nodes in `pick`.

Scorers are made by name through the registry (`register`, `resolve`); their caches
live with the `ClusterState` they were made for (one per cycle), not across cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from scheduler import model as m
from scheduler.placement import fit
from scheduler.placement.fragmentation import Depletion, Supply, WorkloadMix
from scheduler.placement.state import UNIT, ClusterState, Sig

_CACHE_LIMIT = 200_000  # signatures per demand before a cache is dropped


@dataclass(frozen=True, slots=True)
class Choice:
    """A scorer's verdict on one node class for one worker: `score` (lower is better)
    and, for a one-GPU worker, `take`, the free share (units) of the GPU it takes from;
    None for other shapes (whole GPUs come from fully free ones)."""

    score: float
    take: int | None = None


class Pick(NamedTuple):
    """The node (index into `ClusterState.nodes`) chosen for one worker, and why."""

    node: int
    choice: Choice


Feasible = Sequence[tuple[Sig, list[int], Choice]]  # (class, its usable nodes, verdict)


class Scorer:
    """Base: subclasses define `name` and `score`."""

    name = "scorer"
    # False: the choice depends on more than a node's signature; `pick` then chooses
    # among every feasible node.
    by_signature: ClassVar[bool] = True

    def __init__(self) -> None:
        self._cache: dict[fit.Demand, dict[Sig, Choice | None]] = {}

    def cache_for(self, d: fit.Demand) -> dict[Sig, Choice | None]:
        """The per-class verdicts for one demand (None: does not fit; pure, so valid
        across rollbacks)."""
        c = self._cache.get(d)
        if c is None or len(c) > _CACHE_LIMIT:
            c = self._cache[d] = {}
        return c

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        """The verdict for a class where one worker of `d` fits, taking `n`."""
        raise NotImplementedError

    def pick(self, state: ClusterState, d: fit.Demand, feasible: Feasible) -> Pick:
        """With `by_signature = False`: the node among `feasible` (never empty)."""
        raise NotImplementedError


def best_fit_take(n: fit.Need, shares: tuple[int, ...]) -> int | None:
    """The least free GPU that still holds a one-GPU worker (None for other shapes)."""
    if n.gpus != 1:
        return None
    return fit.candidates(n, shares)[-1]


def _allocated_after(s: Sig, d: fit.Demand, n: fit.Need) -> tuple[float, float]:
    """GPU and CPU allocation ratios of the node once the worker is placed."""
    cap = len(s.shares) * UNIT
    gpu = 1 - (sum(s.shares) - n.gpus * n.share) / cap if cap else 0.0
    cpu = 1 - (s.cpu - d.cpu_milli) / s.cap_cpu if s.cap_cpu else 0.0
    return gpu, cpu


class Binpack(Scorer):
    """Most-allocated node first; the fullest GPU that fits. CPU-only workers keep
    off GPU nodes when they can, so that GPUs are not stranded behind CPU work."""

    name = "binpack"

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        gpu, cpu = _allocated_after(s, d, n)
        keep_off = 1.0 if n.gpus == 0 and s.shares else 0.0
        return Choice(keep_off - gpu - 1e-3 * cpu, best_fit_take(n, s.shares))


class Spread(Scorer):
    """Least-allocated node first; the emptiest GPU."""

    name = "spread"

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        gpu, cpu = _allocated_after(s, d, n)
        keep_off = 1.0 if n.gpus == 0 and s.shares else 0.0
        take = fit.candidates(n, s.shares)[0] if n.gpus == 1 else None
        return Choice(keep_off + gpu + 1e-3 * cpu, take)


class Fgd(Scorer):
    """Fragmentation gradient descent: the node and GPU where the expected
    fragmentation with respect to the workload mix, plus the GPU share stranded by
    CPU or memory (`WorkloadMix.score`), grows least.

    The growth is compared on a grid of `QUANTUM` (1e-6 GPU): mathematically equal
    growths computed through different float sums are equal, not ordered by rounding
    noise. Ties go to the fullest GPU, then to the smallest node (fewest GPUs, then
    least CPU, then least memory: large nodes stay whole for large tasks), then to the
    lowest node index."""

    name = "fgd"

    def __init__(self, mix: WorkloadMix) -> None:
        super().__init__()
        self.mix = mix
        self._cache = mix.score_cache  # type: ignore[assignment]

    def growth(self, s: Sig, d: fit.Demand, n: fit.Need, take: int | None) -> tuple[float, float]:
        """(growth of F_n(M), growth of the stranded share) in share units if a worker
        of `d` takes its GPUs on a node in state `s` (`take`: see `fit.after`)."""
        mix = self.mix
        cpu, mem = s.cpu - d.cpu_milli, s.mem - d.memory_mib
        shares = fit.after(n, s.shares, take)
        frag = mix.scale * (
            mix.fragmentation(s.model, s.gpu_mem, cpu, mem, shares)
            - mix.fragmentation(s.model, s.gpu_mem, s.cpu, s.mem, s.shares)
        )
        if not mix.stranding:
            return frag, 0.0
        stranded = mix.stranded(s.model, s.gpu_mem, cpu, mem, shares) - mix.stranded(
            s.model, s.gpu_mem, s.cpu, s.mem, s.shares
        )
        return frag, mix.stranding * stranded

    def score(self, s: Sig, d: fit.Demand, n: fit.Need) -> Choice:
        score = self.mix.score
        before = score(s.model, s.gpu_mem, s.cpu, s.mem, s.shares)
        cpu, mem = s.cpu - d.cpu_milli, s.mem - d.memory_mib
        if n.gpus != 1:
            delta = score(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, None)) - before
            return Choice(round(delta / QUANTUM) + size_rank(s))
        best: tuple[int, int] | None = None
        for v in reversed(fit.candidates(n, s.shares)):  # ties go to the fullest GPU
            delta = score(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, v)) - before
            key = round(delta / QUANTUM)
            if best is None or key < best[0]:
                best = (key, v)
        assert best is not None  # fits: some GPU holds the worker
        return Choice(best[0] + size_rank(s), best[1])


QUANTUM = UNIT // 1_000_000  # share units: growths are compared to 1e-6 GPU


def size_rank(s: Sig) -> float:
    """A tie-break in [0, 0.01): smaller nodes (GPUs, then CPU, then memory) first."""
    gpus = min(len(s.shares), 99)
    cores = min(s.cap_cpu // 1000, 9_999)
    gib = min(s.cap_mem // 1024, 99_999)
    return ((gpus * 10_000 + cores) * 100_000 + gib) / 1e13


Factory = Callable[[ClusterState, m.JobRequest, WorkloadMix | None], Scorer]
REGISTRY: dict[str, Factory] = {}  # policy name -> factory (`register` adds)


def register(name: str, factory: Factory) -> None:
    """Offer a policy by name: `factory(state, job, mix)` makes its scorer for one
    placement on `state` (`per_cycle` keeps one scorer, and its cache, per state)."""
    REGISTRY[name] = factory


def names() -> tuple[str, ...]:
    """The registered policy names."""
    return tuple(REGISTRY)


def per_cycle(make: Callable[[], Scorer]) -> Factory:
    """A factory that makes the scorer once per `ClusterState` (per cycle): its cache
    lives as long as the state, never across cycles or tests."""

    def factory(state: ClusterState, job: m.JobRequest, mix: WorkloadMix | None) -> Scorer:
        got = state.cache.get(factory)
        if got is None:
            got = state.cache[factory] = make()
        assert isinstance(got, Scorer)
        return got

    return factory


def _fgd(state: ClusterState, job: m.JobRequest, mix: WorkloadMix | None) -> Scorer:
    """`fgd` targets `mix`, else the state's `mix` (the core or the benchmark sets it,
    e.g. from pending and recent jobs), else the mix the state learned from the running
    jobs and the jobs placement was asked about. Its cache lives with the mix."""
    supply = supply_of(state)
    chosen = mix or state.mix
    if chosen is None:  # a scarce type joins the learned mix when first seen
        scarce = supply.scarcity(fit.Demand.of(job)) >= SCARCE
        chosen = state.learner.observe(job, urgent=scarce)
    return Fgd(chosen.on(supply, depletion(state, chosen, supply)))


SCARCE = 4.0  # a type only nodes with a quarter of the cluster's GPUs can host


register(m.Policy.BINPACK, per_cycle(Binpack))
register(m.Policy.SPREAD, per_cycle(Spread))
register(m.Policy.FGD, _fgd)


def resolve(
    policy: m.Policy | str | Scorer, state: ClusterState, job: m.JobRequest, mix: WorkloadMix | None
) -> Scorer:
    """The scorer for a policy name (or the scorer itself)."""
    if isinstance(policy, Scorer):
        return policy
    factory = REGISTRY.get(str(policy))
    if factory is None:
        raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(names())}")
    return factory(state, job, mix)


def supply_of(state: ClusterState) -> Supply:
    """The state's nodes as a `Supply` (built once per state: its nodes never change;
    kept in the state's per-cycle cache)."""
    got = state.cache.get(Supply)
    if got is None:
        got = state.cache[Supply] = Supply(state.nodes)
    assert isinstance(got, Supply)
    return got


# Whole-node types grouped by their hosts: (empty-host classes with their GPUs, host
# GPUs in the empty cluster, GPUs of the smallest host, the types).
_Watch = list[tuple[tuple[tuple[Sig, int], ...], int, int, list[fit.Demand]]]


def depletion(state: ClusterState, mix: WorkloadMix, supply: Supply) -> Depletion:
    """How many times the empty hosts of each scarce whole-node type of `mix`
    (`Supply.whole_node`, scarcity at least `SCARCE`) have halved, by their GPUs,
    against the empty cluster: the types whose scarcity `WorkloadMix.on` doubles that
    many times. Counted from the classes of empty nodes (a dict look-up per host
    shape), so cheap per placement; quantised, so the weighted mix, and its caches,
    change a few times per fill. With no empty host left a type counts as having one
    (its weight stays bounded)."""
    key = (depletion, mix)
    watch = state.cache.get(key)
    if watch is None:
        watch = state.cache[key] = _watch(mix, supply)
    assert isinstance(watch, list)
    classes = state.classes
    out: list[tuple[fit.Demand, int]] = []
    for empty, total, smallest, types in watch:
        left = sum(len(classes.get(sig, ())) * gpus for sig, gpus in empty)
        k = (total // max(left, smallest)).bit_length() - 1  # floor(log2(total / left))
        if k > 0:
            out.extend((t, k) for t in types)
    return tuple(out)


def _watch(mix: WorkloadMix, supply: Supply) -> _Watch:
    groups: dict[tuple[tuple[Sig, int], ...], tuple[int, list[fit.Demand]]] = {}
    for t in mix.weights:
        # Scarce ones only: for a whole-node type most nodes can host (an 8-GPU task
        # on any 8-GPU node), the empty nodes deplete with every fill, and keeping
        # them costs the many smaller tasks more than it gains.
        hosts = supply.whole_node(t) if supply.scarcity(t) >= SCARCE else ()
        if hosts:
            # Both kinds of node count as empty hosts, advisory and enforcing (MPS) alike.
            empty = tuple((Sig(model, gpu_mem, cpu, mem, cpu, mem, (UNIT,) * gpus, e), gpus)
                          for (model, gpu_mem, gpus, cpu, mem), _ in hosts
                          for e in (False, True))  # fmt: skip
            total = sum(shape[2] * count for shape, count in hosts)
            groups.setdefault(empty, (total, []))[1].append(t)
    return [(empty, total, min(g for _, g in empty), types)
            for empty, (total, types) in groups.items()]  # fmt: skip
