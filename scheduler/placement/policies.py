"""Placement policies: `binpack`, `spread` and `fgd`, each a small scorer.

A scorer looks at one node class (a `state.Sig`) and one worker's `fit.Demand` and
returns `(score, take)`, lower score better, or None when the worker does not fit;
`take` is the free value of the GPU a one-GPU worker takes from (-1 otherwise). As
the answer depends on the signature alone, `gang` caches it per class and scores
each class once; among the best classes it takes the lowest node index, so every
choice is deterministic. Scorers that need more than the signature (the benchmark's
GPU clustering and random fit, in `baselines`) override `pick`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core import model as m
from scheduler.placement import fit
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.state import UNIT, ClusterState, Sig

Result = tuple[float, int]
_CACHE_LIMIT = 200_000  # signatures per demand before a cache is dropped


class Scorer:
    """Base: subclasses define `name` and `evaluate`."""

    name = "scorer"

    def __init__(self) -> None:
        self._cache: dict[fit.Demand, dict[Sig, Result | None]] = {}

    def cache_for(self, d: fit.Demand) -> dict[Sig, Result | None]:
        """The per-class results for one demand (pure: valid across rollbacks)."""
        c = self._cache.get(d)
        if c is None or len(c) > _CACHE_LIMIT:
            c = self._cache[d] = {}
        return c

    def evaluate(self, s: Sig, d: fit.Demand) -> Result | None:
        raise NotImplementedError

    def pick(
        self, state: ClusterState, d: fit.Demand, feasible: Sequence[tuple[Sig, list[int], Result]]
    ) -> tuple[int, Result] | None:
        """Override to choose among feasible nodes by more than the signature."""
        return None


def best_fit_take(n: fit.Need, shares: tuple[int, ...]) -> int:
    """The least free GPU that still holds a one-GPU worker (-1 for other shapes)."""
    if n.gpus != 1:
        return -1
    return fit.candidates(n, shares)[-1]


def _allocated_after(s: Sig, d: fit.Demand, n: fit.Need) -> tuple[float, float]:
    """GPU and CPU allocation ratios of the node once the worker is placed."""
    cap = len(s.shares) * UNIT
    gpu = 1 - (sum(s.shares) - n.gpus * n.share) / cap if cap else 0.0
    cpu = 1 - (s.cpu - d.cpu) / s.cap_cpu if s.cap_cpu else 0.0
    return gpu, cpu


class Binpack(Scorer):
    """Most-allocated node first; the fullest GPU that fits. CPU-only workers keep
    off GPU nodes when they can, so that GPUs are not stranded behind CPU work."""

    name = "binpack"

    def evaluate(self, s: Sig, d: fit.Demand) -> Result | None:
        n = fit.fits(d, s)
        if n is None:
            return None
        gpu, cpu = _allocated_after(s, d, n)
        keep_off = 1.0 if n.gpus == 0 and s.shares else 0.0
        return keep_off - gpu - 1e-3 * cpu, best_fit_take(n, s.shares)


class Spread(Scorer):
    """Least-allocated node first; the emptiest GPU."""

    name = "spread"

    def evaluate(self, s: Sig, d: fit.Demand) -> Result | None:
        n = fit.fits(d, s)
        if n is None:
            return None
        gpu, cpu = _allocated_after(s, d, n)
        keep_off = 1.0 if n.gpus == 0 and s.shares else 0.0
        take = fit.candidates(n, s.shares)[0] if n.gpus == 1 else -1
        return keep_off + gpu + 1e-3 * cpu, take


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

    def growth(self, s: Sig, d: fit.Demand, n: fit.Need, take: int) -> tuple[float, float]:
        """(growth of F_n(M), growth of the stranded share) in share units if a worker
        of `d` takes its GPUs on a node in state `s` (`take`: see `fit.after`)."""
        mix = self.mix
        cpu, mem = s.cpu - d.cpu, s.mem - d.mem
        shares = fit.after(n, s.shares, take)
        frag = mix.fragmentation(s.model, s.gpu_mem, cpu, mem, shares) - mix.fragmentation(
            s.model, s.gpu_mem, s.cpu, s.mem, s.shares
        )
        if not mix.stranding:
            return frag, 0.0
        stranded = mix.stranded(s.model, s.gpu_mem, cpu, mem, shares) - mix.stranded(
            s.model, s.gpu_mem, s.cpu, s.mem, s.shares
        )
        return frag, mix.stranding * stranded

    def evaluate(self, s: Sig, d: fit.Demand) -> Result | None:
        n = fit.fits(d, s)
        if n is None:
            return None
        score = self.mix.score
        before = score(s.model, s.gpu_mem, s.cpu, s.mem, s.shares)
        cpu, mem = s.cpu - d.cpu, s.mem - d.mem
        if n.gpus != 1:
            delta = score(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, -1)) - before
            return round(delta / QUANTUM) + size_rank(s), -1
        best: tuple[int, int] | None = None
        for v in reversed(fit.candidates(n, s.shares)):  # ties go to the fullest GPU
            delta = score(s.model, s.gpu_mem, cpu, mem, fit.after(n, s.shares, v)) - before
            key = round(delta / QUANTUM)
            if best is None or key < best[0]:
                best = (key, v)
        assert best is not None  # fits: some GPU holds the worker
        return best[0] + size_rank(s), best[1]


QUANTUM = UNIT // 1_000_000  # share units: growths are compared to 1e-6 GPU


def size_rank(s: Sig) -> float:
    """A tie-break in [0, 0.01): smaller nodes (GPUs, then CPU, then memory) first."""
    gpus = min(len(s.shares), 99)
    cores = min(s.cap_cpu // 1000, 9_999)
    gib = min(s.cap_mem // 1024, 99_999)
    return ((gpus * 10_000 + cores) * 100_000 + gib) / 1e13


BINPACK = Binpack()
SPREAD = Spread()


def resolve(
    policy: m.Policy | str | Scorer, state: ClusterState, job: m.JobRequest, mix: WorkloadMix | None
) -> Scorer:
    """The scorer for a policy name. `fgd` uses `mix`, else the state's `mix` (the core
    or the benchmark sets it, e.g. from pending and recent jobs), else the mix the
    state learned from the running jobs and the jobs placement was asked about."""
    if isinstance(policy, Scorer):
        return policy
    name = m.Policy(policy)
    if name is m.Policy.BINPACK:
        return BINPACK
    if name is m.Policy.SPREAD:
        return SPREAD
    chosen = mix or state.mix or state.learner.observe(job)
    return Fgd(chosen)
