"""Fit rules: what one worker needs on a node, and whether a node state holds it.

Used by the policies (to score a node class), by `gang` (capacity of a node for a
gang) and by `diagnose`. The rules, from DESIGN.md "Scheduling semantics" 4:

- a fractional worker (0 < gpu < 1, or `gpu_memory_mib`, which becomes
  `gpu_memory_mib / node.gpu_memory_mib` of a GPU) takes one GPU with enough free
  share and never spans GPUs; a memory request larger than the GPU does not fit;
- a whole-number request takes that many fully free GPUs on one node;
- a worker with gpu == 0 takes CPU and memory only;
- CPU and memory must fit; `gpu_types` restricts the node models (empty: any);
- `enforced_only`: a fractional worker goes only to a node that enforces fractions
  (MPS); whole GPUs are exclusive anyway, so they go anywhere;
- `distinct`: one GPU holds at most one worker of the job (NCCL ranks), so a node holds
  as many fractional workers of it as it has GPUs with room for one (one in all on a
  node of slices, where the device plugin, not Shoal, picks the GPU);
- `slices`: a node whose device plugin shares each GPU as N enforced MPS replicas holds
  fractions of at most 1/N, each taking one replica (1/N); no whole GPUs;
- `no_sharing`: a node where GPU sharing does not work now holds no fractional worker;
  whole GPUs and CPU-only workers still go there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scheduler import model as m
from scheduler.placement.shares import UNIT, Sig, units


class Demand(NamedTuple):
    """What one worker asks for, hashable: what placement fits and scores, the policies'
    caches key, and one task type of a workload mix (`fragmentation.WorkloadMix`)."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu: float = 0.0
    gpu_memory_mib: int | None = None
    gpu_types: tuple[str, ...] = ()
    enforced_only: bool = False  # a fraction only where it is enforced (`enforcement: required`)

    @staticmethod
    def of(job: m.JobRequest) -> Demand:
        return Demand(
            job.cpu_milli,
            job.memory_mib,
            job.gpu,
            job.gpu_memory_mib,
            tuple(job.gpu_types),
            job.enforced_only,
        )


class Need(NamedTuple):
    """GPUs of one worker on a given node model: `gpus` GPUs of `share` units each."""

    gpus: int
    share: int


NO_GPU = Need(0, 0)


def gpu_share(gpu: float, gpu_memory_mib: int | None, gpu_mem: int) -> float | None:
    """The one rule for the share of a GPU one worker takes on a GPU of `gpu_mem` MiB:
    `gpu` itself (a fraction, or each of `gpu` whole GPUs: 1.0 each), or for a memory
    request its MiB over the GPU's; None when a memory request can never fit there (a
    GPU smaller than the request, or of unknown memory). Placement, the core's estimate
    of pending demand and the front doors' admission all ask this."""
    if gpu_memory_mib:
        if gpu_mem <= 0 or gpu_memory_mib > gpu_mem:
            return None
        return gpu_memory_mib / gpu_mem
    return min(gpu, 1.0) if gpu > 0 else 0.0


def slice_units(slices: int) -> int:
    """Units of one of `slices` equal slices of a GPU (rounded down: `slices` of them
    always fit in one GPU)."""
    return UNIT // slices


def fractional(d: Demand) -> bool:
    """Whether one worker asks for part of a GPU (a fraction, or GPU memory)."""
    return bool(d.gpu_memory_mib) or 0 < d.gpu < 1


def need(
    d: Demand, model: str, gpu_mem: int, slices: int = 0, no_sharing: bool = False
) -> Need | None:
    """The GPUs one worker takes on a node of this model, or None if it never can. On a
    node whose GPUs are `slices` enforced equal slices (a device plugin's MPS replicas), a
    fractional worker takes one slice, and nothing larger than a slice fits. On a node
    with `no_sharing`, no fractional worker fits."""
    if d.gpu_types and model not in d.gpu_types:
        return None
    if no_sharing and fractional(d):
        return None
    if slices:
        share = gpu_share(d.gpu, d.gpu_memory_mib, gpu_mem)
        if share is None or share > slice_units(slices) / UNIT + m.EPS:
            return None
        return Need(1, slice_units(slices)) if share > 0 else NO_GPU
    if d.gpu_memory_mib:
        share = gpu_share(d.gpu, d.gpu_memory_mib, gpu_mem)
        return None if share is None else Need(1, units(share))
    if d.gpu <= 0:
        return NO_GPU
    if d.gpu < 1:
        return Need(1, units(d.gpu))
    return Need(math.ceil(d.gpu - m.EPS), UNIT)


def worker_gpu_share(job: m.JobRequest, node: m.Node) -> float:
    """GPUs one worker of `job` takes on `node`: `gpu`, or its `gpu_share` of one GPU
    (a memory request that never fits the node counts as one whole GPU)."""
    if job.gpu_memory_mib:
        share = gpu_share(job.gpu, job.gpu_memory_mib, node.gpu_memory_mib)
        return 1.0 if share is None else share
    return job.gpu


def gpu_fits(n: Need, shares: tuple[int, ...]) -> bool:
    """Whether `n.gpus` GPUs each with `n.share` free exist (shares: largest first)."""
    if n.gpus == 0:
        return True
    return len(shares) >= n.gpus and shares[n.gpus - 1] >= n.share


def unenforced(d: Demand, n: Need, s: Sig) -> bool:
    """Whether the worker asks for an enforced fraction and the node only advises one."""
    return d.enforced_only and n.gpus == 1 and n.share < UNIT and not s.enforced


def fits(d: Demand, s: Sig) -> Need | None:
    """The worker's need if one worker fits a node in state `s` now, else None."""
    n = need(d, s.model, s.gpu_mem, s.slices, s.no_sharing)
    if n is None or d.cpu_milli > s.cpu or d.memory_mib > s.mem or not gpu_fits(n, s.shares):
        return None
    return None if unenforced(d, n, s) else n


def candidates(n: Need, shares: tuple[int, ...]) -> list[int]:
    """Distinct free values of the GPUs a one-GPU worker could take, largest first."""
    out: list[int] = []
    for v in shares:
        if v < n.share:
            break
        if not out or out[-1] != v:
            out.append(v)
    return out


def after(n: Need, shares: tuple[int, ...], take: int | None) -> tuple[int, ...]:
    """The sorted shares once a worker took its GPUs (`take`: the free value it takes
    from, for a one-GPU worker; whole GPUs always come from fully free ones)."""
    if n.gpus == 0:
        return shares
    rest = list(shares)
    if n.gpus == 1:
        assert take is not None  # a one-GPU worker names the GPU it takes from
        rest.remove(take)
        rest.append(take - n.share)
    else:
        del rest[: n.gpus]  # the fully free GPUs sort first
        rest.extend([0] * n.gpus)
    rest.sort(reverse=True)
    return tuple(rest)


def capacity(d: Demand, s: Sig, limit: int, *, distinct: bool = False) -> int:
    """How many workers of `d` a node in state `s` holds at once (at most `limit`);
    `distinct`: each on a GPU of its own."""
    n = need(d, s.model, s.gpu_mem, s.slices, s.no_sharing)
    if n is None or unenforced(d, n, s):
        return 0
    k = limit
    if d.cpu_milli > 0:
        k = min(k, s.cpu // d.cpu_milli)
    if d.memory_mib > 0:
        k = min(k, s.mem // d.memory_mib)
    if n.gpus == 1 and distinct and s.slices:
        k = min(k, 1)  # the device plugin picks the replica, so maybe a GPU already used
    elif n.gpus == 1 and distinct:
        k = min(k, sum(1 for v in s.shares if v >= n.share))
    elif n.gpus == 1:
        k = min(k, sum(v // n.share for v in s.shares))
    elif n.gpus > 1:
        k = min(k, sum(1 for v in s.shares if v >= UNIT) // n.gpus)
    return max(k, 0)


def fraction_of(job: m.JobRequest, node: m.Node) -> float:
    """The `WorkerPlacement.fraction` of one worker on `node` (1.0 for whole GPUs; one
    slice on a node of equal slices)."""
    share = worker_gpu_share(job, node)
    if node.slices and 0 < share < 1:
        return slice_units(node.slices) / UNIT
    return share if 0 < share < 1 else 1.0
