"""resource.k8s.io/v1 objects as NVIDIA's DRA driver publishes them, for tests.

The shapes follow kubernetes-sigs/dra-driver-nvidia-gpu: one pool per node named after
it; GPUs `gpu-<i>` with attributes type/uuid/productName/index/...; a `memory` capacity.
Beyond it, two modes Shoal must handle:

- `mig=True`: each GPU is partitionable. Its counter set `gpu-<i>-counters` (counters
  `memory` in bytes and `gpcs`, the GPU's 7 compute slices) lives in a slice of its own,
  since Kubernetes 1.37 lets a slice hold devices or shared counters but not both; the
  whole GPU consumes all of the set, and the MIG devices 1g/2g/3g/7g (1/8, 1/4, 1/2 and
  all of the memory, 1/2/3/7 gpcs) consume their part.
- `consumable=True`: each GPU allows multiple allocations, its memory a consumable
  capacity in 1Gi steps (a claim naming no amount takes all of it).

The objects pass the 1.37 API server's validation: DNS names, C-identifier attribute
names, at most 64 devices per slice when devices consume counters, at most 8 counter
sets per slice. Everything is deterministic, so a test can name what it expects.
"""

from __future__ import annotations

import uuid
from typing import Any

Obj = dict[str, Any]

MAX_DEVICES_WITH_COUNTERS = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures
MAX_DEVICES = 128
MAX_COUNTER_SETS = 8
# (compute slices, eighths of memory, how many fit on one GPU)
MIG_PROFILES = ((1, 1, 7), (2, 2, 3), (3, 4, 2), (7, 8, 1))


def _name(text: str) -> str:
    return text.lower().replace("_", "-")


def gpu_uuid(node: str, index: int, mig: str = "") -> str:
    """Stable per node and index, shaped as NVIDIA's (GPU-<uuid>, MIG-<uuid>)."""
    u = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{index}/{mig}")
    return f"{'MIG' if mig else 'GPU'}-{u}"


def mig_profile(gpcs: int, eighths: int, memory_gib: int) -> str:
    return f"{gpcs}g.{memory_gib * eighths // 8}gb"


def counter_set(index: int) -> str:
    return f"gpu-{index}-counters"


def _common(node: str, index: int, product: str) -> Obj:
    return {
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.82.7"},
        "index": {"int": index},
        "minor": {"int": index},
    }


def _gpu(node: str, i: int, memory_gib: int, product: str, mig: bool, consumable: bool) -> Obj:
    attrs = _common(node, i, product) | {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu_uuid(node, i)},
    }
    memory: Obj = {"value": f"{memory_gib}Gi"}
    device: Obj = {"name": f"gpu-{i}", "attributes": attrs, "capacity": {"memory": memory}}
    if consumable:
        device["allowMultipleAllocations"] = True
        memory["requestPolicy"] = {
            "default": f"{memory_gib}Gi",
            "validRange": {"min": "1Gi", "step": "1Gi"},
        }
    if mig:  # in MIG mode the whole GPU is one more way to use the counter set
        device["consumesCounters"] = [
            {
                "counterSet": counter_set(i),
                "counters": {"memory": {"value": f"{memory_gib}Gi"}, "gpcs": {"value": "7"}},
            }
        ]
    return device


def _migs(node: str, i: int, memory_gib: int, product: str) -> list[Obj]:
    out = []
    for gpcs, eighths, count in MIG_PROFILES:
        profile = mig_profile(gpcs, eighths, memory_gib)
        memory = f"{memory_gib * 1024 * eighths // 8}Mi"
        for j in range(count):
            attrs = _common(node, i, product) | {
                "type": {"string": "mig"},
                "profile": {"string": profile},
                "uuid": {"string": gpu_uuid(node, i, f"{profile}/{j}")},
                "parentUUID": {"string": gpu_uuid(node, i)},
            }
            out.append(
                {
                    "name": f"gpu-{i}-mig-{profile.replace('.', '')}-{j}",
                    "attributes": attrs,
                    "capacity": {"memory": {"value": memory}},
                    "consumesCounters": [
                        {
                            "counterSet": counter_set(i),
                            "counters": {
                                "memory": {"value": memory},
                                "gpcs": {"value": str(gpcs)},
                            },
                        }
                    ],
                }
            )
    return out


def _slice(node: str, driver: str, n: int, generation: int, spec: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": _name(f"{node}-{driver}-{n}")},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 0},
        }
        | spec,
    }


def gpu_slice(
    node: str,
    driver: str = "gpu.nvidia.com",
    gpus: int = 2,
    memory_gib: int = 80,
    product: str = "NVIDIA H100 80GB HBM3",
    mig: bool = False,
    consumable: bool = False,
    generation: int = 1,
) -> list[Obj]:
    """The ResourceSlices of one node's pool: one slice, or with `mig` the counter sets'
    slices and the devices' slices (as many as the per-slice limits require)."""
    devices: list[Obj] = []
    for i in range(gpus):
        devices.append(_gpu(node, i, memory_gib, product, mig, consumable))
        if mig:
            devices.extend(_migs(node, i, memory_gib, product))
    specs: list[Obj] = []
    if mig:
        sets = [
            {
                "name": counter_set(i),
                "counters": {"memory": {"value": f"{memory_gib}Gi"}, "gpcs": {"value": "7"}},
            }
            for i in range(gpus)
        ]
        for k in range(0, len(sets), MAX_COUNTER_SETS):
            specs.append({"sharedCounters": sets[k : k + MAX_COUNTER_SETS]})
    per = MAX_DEVICES_WITH_COUNTERS if mig else MAX_DEVICES
    for k in range(0, len(devices), per):
        specs.append({"devices": devices[k : k + per]})
    slices = [_slice(node, driver, n, generation, spec) for n, spec in enumerate(specs)]
    for s in slices:
        s["spec"]["pool"]["resourceSliceCount"] = len(slices)
    return slices


def gpu_class(
    name: str = "gpu.nvidia.com",
    driver: str = "gpu.nvidia.com",
    type: str = "gpu",
    extended_resource: str | None = None,
    resource_version: str | None = None,
) -> Obj:
    """A DeviceClass selecting the driver's devices of one type ("gpu" or "mig"), as
    NVIDIA's chart installs them (gpu.nvidia.com, mig.nvidia.com)."""
    spec: Obj = {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{driver}" && '
                    f'device.attributes["{driver}"].type == "{type}"'
                }
            }
        ]
    }
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    meta: Obj = {"name": name}
    if resource_version:  # as read back from a server; never set on create
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": meta,
        "spec": spec,
    }


def allocated_claim(
    name: str,
    results: list[tuple[str, str, str] | tuple[str, str, str, dict[str, str]]],
    namespace: str = "jobs",
    device_class: str = "gpu.nvidia.com",
) -> Obj:
    """A ResourceClaim allocated to (driver, pool, device[, consumedCapacity]) results."""
    allocated = []
    for r in results:
        driver, pool, device = r[:3]
        result: Obj = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
        if len(r) == 4:
            result["consumedCapacity"] = r[3]
        allocated.append(result)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": device_class, "count": len(results)},
                    }
                ]
            }
        },
        "status": {"allocation": {"devices": {"results": allocated}}},
    }
