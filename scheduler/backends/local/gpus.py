"""The GPUs of this host, discovered through NVML: what `shoal serve --gpus auto` offers.

`discover(nvml, ...)` reads every GPU's model, memory and UUID. A GPU in MIG mode offers
its MIG devices instead, each a GPU of its own (its own UUID, its slice's memory, model
`<product>-MIG-<profile>` as GPU Feature Discovery's mixed strategy names it); one in MIG
mode with no MIG device created is left out, with the reason (`Host.excluded`). A node's
GPUs are all of one model (`scheduler.model.Node`), so the host becomes one node per
(model, memory): `<host>` when all are alike, else `<host>-<model>`, the host's CPUs and
memory divided between them in proportion to their GPUs.

`Host.visible(node, gpus)` maps a placement's GPU indices back to the UUIDs that the
local backend puts in a worker's CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES.
Called by `host.local_backend`; no GPU at all raises `NoGpu` ("no GPU found: ...").
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends.local.nvml import text
from scheduler.model import Node

MIB = 1024 * 1024


class NoGpu(RuntimeError):
    """This host offers no GPU; the message starts with "no GPU found" and says why."""


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU a worker can be given: a whole GPU, or one MIG device."""

    index: int  # NVML's index of the physical GPU
    uuid: str  # GPU-... or MIG-...
    model: str
    memory_mib: int


@dataclass(frozen=True)
class Host:
    """The discovered GPUs as nodes, and what each node's GPU index means."""

    nodes: tuple[Node, ...]
    devices: Mapping[str, tuple[Device, ...]]  # node name -> its GPUs, by Shoal's index
    excluded: Mapping[str, str] = field(default_factory=dict)  # GPU -> why not offered
    driver: str = ""

    def visible(self, node: str, gpus: Sequence[int]) -> list[str] | None:
        """The UUIDs of `gpus` on `node`, or None when `node` is not a discovered one."""
        devs = self.devices.get(node)
        return None if devs is None else [devs[g].uuid for g in gpus]


def model_name(product: str) -> str:
    """A GPU model as GPU Feature Discovery labels it: the product name, '-' for spaces."""
    return re.sub(r"\s+", "-", product.strip())


def _mig_on(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:  # not a MIG-capable GPU
        return False
    return bool(current)


def _mig_devices(nvml: Any, handle: Any, index: int) -> list[Device]:
    out = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:  # an empty slot
            continue
        out.append(_device(nvml, mig, index))
    return out


def _device(nvml: Any, handle: Any, index: int) -> Device:
    return Device(
        index=index,
        uuid=text(nvml.nvmlDeviceGetUUID(handle)),
        model=model_name(text(nvml.nvmlDeviceGetName(handle))),
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
    )


def read_devices(nvml: Any, host: str) -> tuple[list[Device], dict[str, str], str]:
    """(the GPUs offered, the GPUs left out with why, the driver version)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:  # no driver library, no driver loaded, no device
        raise NoGpu(f"no GPU found: NVML did not start ({e})") from None
    try:
        driver = ""
        with contextlib.suppress(nvml.NVMLError):
            driver = text(nvml.nvmlSystemGetDriverVersion())
        devices: list[Device] = []
        excluded: dict[str, str] = {}
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            if not _mig_on(nvml, handle):
                devices.append(_device(nvml, handle, i))
                continue
            migs = _mig_devices(nvml, handle, i)
            if not migs:
                uuid = text(nvml.nvmlDeviceGetUUID(handle))
                excluded[f"{host}/gpu{i}"] = (
                    f"GPU {i} ({uuid}) is in MIG mode with no MIG device: create GPU and "
                    "compute instances (nvidia-smi mig -cgi ... -C) or turn MIG off"
                )
            devices += migs
        return devices, excluded, driver
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def discover(
    nvml: Any, *, host: str, cpu_milli: int, memory_mib: int, name: str | None = None
) -> Host:
    """This host's GPUs as nodes (see the module doc); `name` overrides the node name."""
    devices, excluded, driver = read_devices(nvml, host)
    if not devices:
        why = "; ".join(excluded.values()) or "NVML lists no GPU"
        raise NoGpu(f"no GPU found: {why}")
    groups: dict[tuple[str, int], list[Device]] = {}
    for d in devices:
        groups.setdefault((d.model, d.memory_mib), []).append(d)
    base = name or host
    nodes, by_node = [], {}
    for (gpu_model, mem), devs in groups.items():
        node = base if len(groups) == 1 else f"{base}-{gpu_model.lower()}"
        share = len(devs) / len(devices)
        nodes.append(
            Node(
                name=node,
                cpu_milli=int(cpu_milli * share),
                memory_mib=int(memory_mib * share),
                gpu_count=len(devs),
                gpu_model=gpu_model,
                gpu_memory_mib=mem,
            )
        )
        by_node[node] = tuple(devs)
    return Host(nodes=tuple(nodes), devices=by_node, excluded=excluded, driver=driver)
