"""Is a claim's device also given to another claim? The check after every allocation
Shoal writes (pure).

Two allocators that do not see each other's in-flight choices (kube-scheduler's
DynamicResources plugin and Shoal, on a node both think is theirs) can write one device
into two claims; nothing in the API server or the kubelet refuses that. Read back
every claim after writing one, and this says whether the written one's devices are
held more than once:

- a device without `allowMultipleAllocations` (or one no slice lists) in another claim;
- a device shared by capacity whose claims together consume more than it has, or that
  another claim holds without a share;
- a device whose shared counters (a GPU and its MIG slices draw on one counter set) the
  claims together overdraw.

Admin access (monitoring) never counts, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.backends.kubernetes.dra.devices import Inventory
from scheduler.backends.kubernetes.dra.usage import DeviceKey, Usage, results

Obj = dict[str, object]


def _held(claim: Mapping[str, object]) -> list[DeviceKey]:
    out = []
    for r in results(dict(claim)):
        if not r.get("adminAccess"):
            out.append((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))))
    return out


def overbooked(
    claims: Mapping[str, Mapping[str, object]], inventory: Inventory, key: str
) -> list[str]:
    """Why claim `key`'s devices are held more than once among `claims` (namespace/name
    -> claim, `key`'s included), one line per device; empty when they are not."""
    mine = claims.get(key)
    if mine is None:
        return []
    # Everything counted below is one device's or one pool's counters: claims holding
    # nothing in the pools of `key`'s devices change none of it (a check per allocation
    # then costs the node's claims, not the cluster's).
    pools = {(driver, pool) for driver, pool, _ in _held(mine)}
    claims = {
        k: c
        for k, c in claims.items()
        if k == key or any((driver, pool) in pools for driver, pool, _ in _held(c))
    }
    holders: dict[DeviceKey, list[str]] = {}
    for k, c in claims.items():
        for held in _held(c):
            holders.setdefault(held, []).append(k)
    usage = Usage.from_claims((dict(c) for c in claims.values()), inventory)
    out = []
    for device_key in dict.fromkeys(_held(mine)):
        others = sorted(k for k in holders.get(device_key, []) if k != key)
        name = "/".join(device_key)
        device = inventory.by_key.get(device_key)
        if device is None or not device.multiple:
            if others:
                out.append(f"{name} is also in ResourceClaim {', '.join(others)}")
        else:
            over = [
                f"{cap - left} of {cap} {cname}"
                for cname, cap in device.capacity.items()
                if (left := usage.capacity_left(device, cname)) < 0
            ]
            if over or device_key in usage.taken:
                out.append(
                    f"{name} is shared beyond its capacity ({', '.join(over) or 'held whole'}) "
                    f"with ResourceClaim {', '.join(others)}"
                )
        if device is not None:
            out.extend(_counters(usage, inventory, device_key, claims, key))
    return out


def _counters(
    usage: Usage,
    inventory: Inventory,
    device_key: DeviceKey,
    claims: Mapping[str, Mapping[str, object]],
    key: str,
) -> list[str]:
    """The counter sets `device_key` draws on that the claims together overdraw, with
    the other claims drawing on them."""
    device = inventory.by_key[device_key]
    out = []
    for counter_set, _ in device.consumes:
        left = usage.counters_left(device.driver, device.pool, counter_set)
        short = sorted(n for n, v in left.items() if v < 0)
        if not short:
            continue
        sharing = sorted(
            k
            for k, c in claims.items()
            if k != key
            and any(
                (d := inventory.by_key.get(h)) is not None
                and d.pool == device.pool
                and any(s == counter_set for s, _ in d.consumes)
                for h in _held(c)
            )
        )
        out.append(
            f"{'/'.join(device_key)}: counters {', '.join(short)} of set {counter_set} "
            f"are overdrawn with ResourceClaim {', '.join(sharing) or '(unknown)'}"
        )
    return out
