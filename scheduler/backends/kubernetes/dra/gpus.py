"""The GPUs of each node as the scheduler counts them, from DRA devices.

A node's GPUs are its whole-GPU devices. MIG devices are partitions of one of them, not
more GPUs (DESIGN: "MIG slices are not GPUs"): NVIDIA's driver publishes each GPU in MIG
mode with a counter set that the whole GPU and every MIG device consume, which is how a
MIG device finds its parent here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.backends.kubernetes.dra.devices import Device, Inventory
from scheduler.backends.kubernetes.dra.selectors import DeviceClasses

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """A whole GPU or a MIG device, with what the scheduler reads off its attributes."""

    device: Device
    model: str
    memory_bytes: int
    uuid: str
    mig_profile: str | None = None
    parent: Device | None = None  # the whole GPU of a MIG device

    @property
    def memory_mib(self) -> int:
        return self.memory_bytes // MIB

    @property
    def memory_capacity(self) -> str:
        """The fully qualified name of the memory capacity: `<driver>/memory`."""
        return f"{self.device.driver}/memory"

    @property
    def shareable(self) -> bool:
        """Consumable capacity: several claims may each take part of its memory."""
        return self.device.multiple and self.memory_capacity in self.device.capacity


@dataclass(frozen=True, slots=True)
class NodeGpus:
    node: str
    gpus: tuple[GpuDevice, ...] = ()  # whole GPUs, in natural order of device name
    migs: Mapping[str, tuple[GpuDevice, ...]] = field(default_factory=dict)  # by parent name
    device_class: str = ""

    @property
    def shareable(self) -> bool:
        """Every GPU is shared by capacity, so fractions need no reservation pod."""
        return bool(self.gpus) and all(g.shareable for g in self.gpus)


def _natural(name: str) -> tuple[object, ...]:
    # gpu-2 before gpu-10: drivers number devices, and the order is the GPU index.
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _attr(device: Device, name: str) -> object:
    return device.attributes.get(f"{device.driver}/{name}")


def is_mig(device: Device) -> bool:
    """NVIDIA's driver says type "mig" and names the profile; either will do."""
    return _attr(device, "type") == "mig" or _attr(device, "profile") is not None


def gpu_device(device: Device, parent: Device | None = None) -> GpuDevice:
    profile = _attr(device, "profile")
    return GpuDevice(
        device=device,
        model=str(_attr(device, "productName") or ""),
        memory_bytes=device.capacity.get(f"{device.driver}/memory", 0),
        uuid=str(_attr(device, "uuid") or ""),
        mig_profile=str(profile) if profile is not None else None,
        parent=parent,
    )


def node_gpus(
    inventory: Inventory, classes: DeviceClasses, gpu_class: str, mig_class: str | None = None
) -> dict[str, NodeGpus]:
    """Per node, the devices of `gpu_class` (and of `mig_class`, for drivers that put MIG
    devices in a class of their own) as whole GPUs and their MIG devices."""
    wholes: dict[str, list[Device]] = defaultdict(list)
    migs: dict[str, list[Device]] = defaultdict(list)
    for d in inventory.devices:
        if classes.matches(gpu_class, d) or (mig_class and classes.matches(mig_class, d)):
            (migs if is_mig(d) else wholes)[d.node].append(d)

    out: dict[str, NodeGpus] = {}
    for node in sorted(set(wholes) | set(migs)):
        gpus = sorted(wholes[node], key=lambda d: _natural(d.name))
        # A MIG device's parent is the whole GPU consuming the same counter set.
        owner = {(g.driver, g.pool, cs): g for g in gpus for cs, _ in g.consumes}
        children: dict[str, list[GpuDevice]] = defaultdict(list)
        for m in migs[node]:
            parent = next(
                (owner[k] for cs, _ in m.consumes if (k := (m.driver, m.pool, cs)) in owner),
                None,
            )
            # A MIG device without a parent GPU among the class's devices is kept under ""
            # for reporting; no GPU index reaches it.
            children[parent.name if parent else ""].append(gpu_device(m, parent))
        out[node] = NodeGpus(
            node,
            tuple(gpu_device(g) for g in gpus),
            {
                p: tuple(sorted(ms, key=lambda g: (g.memory_bytes, _natural(g.device.name))))
                for p, ms in sorted(children.items())
            },
            gpu_class,
        )
    return out
