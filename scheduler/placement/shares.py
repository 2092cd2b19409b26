"""GPU shares as integers, and the node signature that placement groups nodes by.

Shared by `state` (which keeps them), `fit` and the policies. A share is an integer
count of 1e-9 of a GPU (the core model's `EPS`): exact sums, exact undo.
"""

from __future__ import annotations

from typing import NamedTuple

from scheduler import model as m

UNIT = round(1 / m.EPS)  # integer share units in one whole GPU


def units(fraction: float) -> int:
    """A GPU share as integer units (rounded to the model's EPS)."""
    return round(fraction * UNIT)


class Sig(NamedTuple):
    """What placement needs to know about a node: equal signatures, equal choices."""

    model: str
    gpu_mem: int
    cap_cpu: int
    cap_mem: int
    cpu: int  # free milli-CPU
    mem: int  # free MiB
    shares: tuple[int, ...]  # free units per GPU, largest first
    enforced: bool = False  # fractions are held to their share here (MPS), not advisory
    slices: int = 0  # GPUs shared as this many equal enforced slices (MPS replicas)
    no_sharing: bool = False  # no fractions here now (`Node.no_sharing`); whole GPUs do

    @staticmethod
    def empty(n: m.Node) -> Sig:
        """`n` with nothing on it and GPU sharing working (`no_sharing` passes): what
        "can never run" is judged against."""
        cpu, mem, gpus = n.cpu_milli, n.memory_mib, (UNIT,) * n.gpu_count
        return Sig(n.gpu_model, n.gpu_memory_mib, cpu, mem, cpu, mem, gpus,
                   n.enforcement.enforcing, n.slices)  # fmt: skip


Tag = tuple[int, int]  # (GPUs per worker, units per GPU): the shape of a placed worker
