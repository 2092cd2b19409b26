"""What allocated ResourceClaims already hold: whole devices, shares of consumable
capacity, and shared counters.

Kubernetes keeps no ledger of free devices: the allocator (kube-scheduler, or Shoal for
its own claims) derives it from `status.allocation` of every claim, and so does this.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends.kubernetes.dra.devices import CounterKey, Device, Inventory, qualified
from scheduler.spec.quantities import quantity_int

Obj = dict[str, Any]
DeviceKey = tuple[str, str, str]


def results(claim: Obj) -> list[Obj]:
    """The device results of a claim's allocation (none while it is not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def _default_share(device: Device) -> dict[str, int]:
    # A share without consumedCapacity takes each capacity's policy default, or all of
    # it when there is no policy (the API's documented defaults).
    out = {}
    for name, total in device.capacity.items():
        policy = device.policies.get(name)
        out[name] = policy.default if policy and policy.default is not None else total
    return out


@dataclass(frozen=True, slots=True)
class Usage:
    """Devices in use. `in_use` is every device some claim holds, whole or a share:
    a device in use has consumed its counters once, however many shares it has."""

    inventory: Inventory
    taken: frozenset[DeviceKey] = frozenset()  # held whole
    consumed: Mapping[DeviceKey, Mapping[str, int]] = field(default_factory=dict)
    in_use: frozenset[DeviceKey] = frozenset()
    counters_used: Mapping[CounterKey, Mapping[str, int]] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()  # results naming devices no slice lists (gone, or foreign)

    @classmethod
    def from_claims(
        cls,
        claims: Iterable[Obj],
        inventory: Inventory,
        exclude: Callable[[Obj], bool] = lambda claim: False,
    ) -> Usage:
        taken: set[DeviceKey] = set()
        consumed: dict[DeviceKey, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        unknown: list[str] = []
        for claim in claims:
            if exclude(claim):
                continue
            for r in results(claim):
                if r.get("adminAccess"):  # admin access (monitoring) never blocks a device
                    continue
                key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                device = inventory.by_key.get(key)
                if device is None:
                    unknown.append("/".join(key))
                    taken.add(key)  # unseen device: still held, should it come back
                elif device.multiple:
                    raw = r.get("consumedCapacity")
                    try:
                        share = (
                            {n: quantity_int(v) for n, v in raw.items()}
                            if raw
                            else _default_share(device)
                        )
                    except (ValueError, TypeError, AttributeError):
                        taken.add(key)  # an amount nobody can read: assume all of it
                        continue
                    for name, amount in share.items():
                        consumed[key][qualified(name, device.driver)] += amount
                else:
                    taken.add(key)
        in_use = taken | set(consumed)
        counters: dict[CounterKey, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for key in in_use:
            device = inventory.by_key.get(key)
            if device is None:
                continue
            for counter_set, amounts in device.consumes:
                for name, amount in amounts.items():
                    counters[(device.driver, device.pool, counter_set)][name] += amount
        return cls(
            inventory,
            frozenset(taken),
            {k: dict(v) for k, v in consumed.items()},
            frozenset(in_use),
            {k: dict(v) for k, v in counters.items()},
            tuple(sorted(unknown)),
        )

    def counters_left(self, driver: str, pool: str, counter_set: str) -> Mapping[str, int]:
        """What the counter set has left; empty when no slice publishes it (yet)."""
        total = self.inventory.counters.get((driver, pool, counter_set), {})
        used = self.counters_used.get((driver, pool, counter_set), {})
        return {name: value - used.get(name, 0) for name, value in total.items()}

    def counters_fit(self, device: Device) -> str | None:
        """None if allocating the (unused) device would overflow no counter, else why."""
        for counter_set, amounts in device.consumes:
            left = self.counters_left(device.driver, device.pool, counter_set)
            if not left and amounts:
                return f"counter set {counter_set} of pool {device.pool} is not published"
            for name, amount in amounts.items():
                if left.get(name, 0) < amount:
                    return (
                        f"counter {name} of set {counter_set} has {left.get(name, 0)} left,"
                        f" {device.name} needs {amount}"
                    )
        return None

    def capacity_left(self, device: Device, name: str) -> int:
        if device.key in self.taken:
            return 0
        total = device.capacity.get(name, 0)
        return total - self.consumed.get(device.key, {}).get(name, 0)

    def is_free(self, device: Device) -> bool:
        """Nobody holds any of it, and taking it overflows no shared counter."""
        return device.key not in self.in_use and self.counters_fit(device) is None

    def why_not(self, device: Device, consumed_capacity: Mapping[str, int] | None) -> str | None:
        """None if the device can take this allocation (None: the whole device)."""
        if device.blocked:
            return f"{device.name} is tainted {', '.join(k for k, _, _ in device.taints)}"
        if consumed_capacity is None:
            if device.key in self.in_use:
                return f"{device.name} is in use"
            return self.counters_fit(device)
        if not device.multiple:
            return f"{device.name} does not allow shared allocations"
        if device.key in self.taken:
            return f"{device.name} is in use"
        for name, amount in consumed_capacity.items():
            left = self.capacity_left(device, name)
            if amount > left:
                return f"{device.name} has {left} of {name} left, {amount} asked"
        # The first share of a device takes its counters; later ones took them already.
        return None if device.key in self.in_use else self.counters_fit(device)

    def fits(self, device: Device, consumed_capacity: Mapping[str, int] | None) -> bool:
        return self.why_not(device, consumed_capacity) is None

    def with_allocation(self, device: Device, consumed_capacity: Mapping[str, int] | None) -> Usage:
        """This usage plus one more allocation, recorded as from_claims would record it:
        to choose several devices in a row without choosing one twice."""
        key = device.key
        taken, consumed = self.taken, dict(self.consumed)
        if device.multiple:
            share = _default_share(device) if consumed_capacity is None else consumed_capacity
            mine = dict(consumed.get(key, {}))
            for name, amount in share.items():
                mine[name] = mine.get(name, 0) + amount
            consumed[key] = mine
        else:
            taken = taken | {key}
        counters = {k: dict(v) for k, v in self.counters_used.items()}
        if key not in self.in_use:  # a device's counters are taken by its first allocation
            for counter_set, amounts in device.consumes:
                mine = counters.setdefault((device.driver, device.pool, counter_set), {})
                for name, amount in amounts.items():
                    mine[name] = mine.get(name, 0) + amount
        return Usage(self.inventory, taken, consumed, self.in_use | {key}, counters, self.unknown)
