"""Which devices one worker gets on its node, given the placement's GPU indices.

The core places workers on GPU indices of a node; on a DRA node those indices are
positions in `offered(node, foreign)`: the node's whole GPUs, in device-name order, less
those that claims of other schedulers leave nothing of. Shoal's own claims do not shift
the indices (the core already counts them), and `held` pins an index to the device the
same job was given before, so a job's workers never move because of someone else.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from scheduler.backends.kubernetes.dra.devices import Device
from scheduler.backends.kubernetes.dra.gpus import GpuDevice, NodeGpus
from scheduler.backends.kubernetes.dra.usage import Usage

Pick = tuple[Device, Mapping[str, int] | None]  # a device, and the capacity it consumes


@dataclass(frozen=True, slots=True)
class Choice:
    """The devices to allocate; consumed capacity None means the whole device."""

    picks: tuple[Pick, ...]
    mig_profile: str | None = None  # the profile of the MIG device picked, if one was

    @property
    def devices(self) -> tuple[Pick, ...]:
        return self.picks

    def __iter__(self) -> Iterator[Pick]:
        return iter(self.picks)

    def __len__(self) -> int:
        return len(self.picks)


@dataclass(frozen=True, slots=True)
class Unfit:
    reason: str


def _left_of(gpu: GpuDevice, node: NodeGpus, usage: Usage) -> bool:
    """Something of this GPU is still free: all of it, some memory, or a MIG device."""
    d = gpu.device
    if d.key in usage.taken:
        return False
    if usage.is_free(d):
        return True
    if gpu.shareable and usage.capacity_left(d, gpu.memory_capacity) > 0:
        return True
    return any(usage.is_free(m.device) for m in node.migs.get(d.name, ()))


def offered(node: NodeGpus, foreign: Usage) -> list[GpuDevice]:
    """The GPUs a placement's indices count: index i is the i-th of these. `foreign` is
    the usage of other schedulers' claims only (Usage.from_claims with exclude= Shoal's).
    A GPU partly used by them is still offered; choose() says Unfit if what is left is
    too little for the worker."""
    return [g for g in node.gpus if _left_of(g, node, foreign)]


def _where(node: NodeGpus) -> str:
    return f"node {node.node}" + (
        f" (DeviceClass {node.device_class})" if node.device_class else ""
    )


def _gpu_of(node: NodeGpus, device: Device) -> GpuDevice | None:
    for g in node.gpus:
        if g.device.key == device.key:
            return g
    for children in node.migs.values():
        for m in children:
            if m.device.key == device.key and m.parent is not None:
                return next((g for g in node.gpus if g.device.key == m.parent.key), None)
    return None


def _share(gpu: GpuDevice, memory: int | None) -> dict[str, int] | str:
    """The capacity a share of `memory` bytes consumes (all of it for None), each amount
    rounded up as the device's requestPolicy makes the allocator do; or why it cannot."""
    d = gpu.device
    out = {}
    for name, total in d.capacity.items():
        policy = d.policies.get(name)
        if name == gpu.memory_capacity and memory is not None:
            want: int | None = memory
        elif memory is None:
            want = total
        else:  # capacity the request does not name: the policy default, or all of it
            want = policy.default if policy and policy.default is not None else total
        amount = policy.round_up(want) if policy and want is not None else want
        if amount is None or amount > total:
            return f"{d.name}'s request policy for {name} allows no share of {want}"
        out[name] = amount
    return out


def choose(
    node: NodeGpus,
    usage: Usage,
    indices: Sequence[int],
    fraction: float,
    held: Mapping[int, Device] | None = None,
    *,
    gpus: Sequence[GpuDevice] | None = None,
) -> Choice | Unfit:
    """Devices for one worker. `usage` is every claim but this worker's own; `gpus` is
    `offered(node, foreign)` (default: all the node's GPUs); `held` maps an index to the
    device the same job already uses there. fraction 1 takes whole GPUs; a fraction
    below 1 takes part of the GPU at a single index."""
    held = held or {}
    listed = list(node.gpus if gpus is None else gpus)
    if not indices or len(set(indices)) != len(indices):
        return Unfit(f"GPU indices {list(indices)} on {_where(node)} are empty or repeat")
    if not 0 < fraction <= 1:
        return Unfit(f"a GPU fraction is above 0 and at most 1, not {fraction}")
    targets: list[GpuDevice] = []
    for i in indices:
        if i in held:
            gpu = _gpu_of(node, held[i])
            if gpu is None:
                return Unfit(f"{_where(node)} no longer has {held[i].name}, held at index {i}")
        elif 0 <= i < len(listed):
            gpu = listed[i]
        else:
            return Unfit(f"{_where(node)} offers {len(listed)} GPUs; there is no GPU index {i}")
        targets.append(gpu)

    if fraction == 1:
        picks: list[Pick] = []
        for gpu in targets:
            consumed = _share(gpu, None) if gpu.device.multiple else None
            if isinstance(consumed, str):
                return Unfit(f"{_where(node)}: {consumed}")
            why = usage.why_not(gpu.device, consumed)
            if why is not None:
                return Unfit(f"{_where(node)}: whole GPU {gpu.device.name} is not free: {why}")
            usage = usage.with_allocation(gpu.device, consumed)
            picks.append((gpu.device, consumed))
        return Choice(tuple(picks))

    if len(targets) != 1:
        return Unfit(f"a fraction ({fraction}) takes one GPU, not indices {list(indices)}")
    gpu = targets[0]
    # Fraction(repr()) reads 0.1 as 1/10 exactly, so a share never misses a byte.
    memory = math.ceil(Fraction(repr(fraction)) * gpu.memory_bytes)
    if gpu.shareable:
        consumed = _share(gpu, memory)
        if isinstance(consumed, str):
            return Unfit(f"{_where(node)}: {consumed}")
        why = usage.why_not(gpu.device, consumed)
        if why is not None:
            return Unfit(f"{_where(node)}: GPU {gpu.device.name} cannot take {fraction}: {why}")
        return Choice(((gpu.device, consumed),))
    children = node.migs.get(gpu.device.name, ())
    if children:
        big_enough = [m for m in children if m.memory_bytes >= memory]
        pinned = held.get(indices[0])
        # The MIG device the job had comes first, then the smallest that is big enough.
        ordered = sorted(big_enough, key=lambda m: pinned is None or m.device.key != pinned.key)
        for m in ordered:
            if usage.fits(m.device, None):
                return Choice(((m.device, None),), m.mig_profile)
        return Unfit(
            f"{_where(node)}: no free MIG device of GPU {gpu.device.name} has"
            f" {memory // (1024 * 1024)} MiB ({fraction} of the GPU); {len(big_enough)}"
            f" of its {len(children)} are big enough and all are in use"
        )
    return Unfit(
        f"{_where(node)}: GPU {gpu.device.name} is neither shared by capacity nor"
        " partitionable: fractions need a reservation pod"
    )
