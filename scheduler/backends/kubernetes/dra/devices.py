"""ResourceSlices (resource.k8s.io/v1) read into devices and shared counters.

A driver publishes each pool as `spec.pool.resourceSliceCount` slices of one
`spec.pool.generation`; while it rewrites a pool, slices of an older generation linger,
and only the newest generation describes the hardware. Since 1.37 a slice holds either
devices or shared counters, never both, so a partitionable GPU's counter set and the
devices consuming it come from different slices of the same pool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.spec.quantities import quantity_int

Obj = dict[str, Any]
CounterKey = tuple[str, str, str]  # (driver, pool, counter set)
# Taints that keep the scheduler off a device unless the claim tolerates them (Shoal's
# claims tolerate none): a driver taints a GPU it finds unhealthy.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class Version(str):
    """A `version` attribute: a string the CEL environment exposes as a semver."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """How a consumable capacity may be requested (capacity.requestPolicy)."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()
    min: int | None = None
    max: int | None = None
    step: int | None = None

    def round_up(self, amount: int) -> int | None:
        """The amount the allocator would really consume for a request of `amount`:
        the next valid value, or the next step above min; None if the policy refuses it."""
        if self.valid_values:
            return next((v for v in self.valid_values if v >= amount), None)
        if self.min is not None:
            amount = max(amount, self.min)
            if self.step:
                amount = self.min + -(-(amount - self.min) // self.step) * self.step
        if self.max is not None and amount > self.max:
            return None
        return amount


@dataclass(frozen=True, slots=True)
class Device:
    """One allocatable device. Names of attributes and capacities are fully qualified."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, object] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    consumes: tuple[tuple[str, Mapping[str, int]], ...] = ()
    multiple: bool = False
    policies: Mapping[str, RequestPolicy] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    @property
    def blocked(self) -> bool:
        """Tainted so that an intolerant claim may not get it."""
        return any(effect in BLOCKING_EFFECTS for _, _, effect in self.taints)

    def __hash__(self) -> int:  # the mappings are not hashable; the key identifies a device
        return hash(self.key)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The devices of all slices, and the counter sets their pools share."""

    devices: tuple[Device, ...] = ()
    counters: Mapping[CounterKey, Mapping[str, int]] = field(default_factory=dict)
    incomplete: frozenset[tuple[str, str]] = frozenset()  # (driver, pool) missing slices
    skipped: tuple[str, ...] = ()  # devices that could not be read, and why
    by_key: Mapping[tuple[str, str, str], Device] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Claims name devices by (driver, pool, name): index them once.
        object.__setattr__(self, "by_key", {d.key: d for d in self.devices})


def qualified(name: str, driver: str) -> str:
    """`productName` of driver gpu.nvidia.com is `gpu.nvidia.com/productName`."""
    return name if "/" in name else f"{driver}/{name}"


def split_qualified(name: str) -> tuple[str, str]:
    domain, _, ident = name.rpartition("/")
    return domain, ident


def _attribute(value: Mapping[str, Any]) -> object:
    # Exactly one of these is set; list forms (1.37, DRAListTypeAttributes) become tuples.
    for key, kind in (("int", int), ("bool", bool), ("string", str)):
        if key in value:
            return kind(value[key])
    if "version" in value:
        return Version(value["version"])
    for key, one in (("ints", int), ("bools", bool), ("strings", str), ("versions", Version)):
        if key in value:
            return tuple(one(v) for v in value[key])
    return None


def _counters(counters: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: quantity_int(c["value"]) for name, c in (counters or {}).items()}


def _policy(raw: Mapping[str, Any] | None) -> RequestPolicy | None:
    if not raw:
        return None
    rng = raw.get("validRange") or {}

    def opt(v: Any) -> int | None:
        return None if v is None else quantity_int(v)

    return RequestPolicy(
        default=opt(raw.get("default")),
        valid_values=tuple(sorted(quantity_int(v) for v in raw.get("validValues") or ())),
        min=opt(rng.get("min")),
        max=opt(rng.get("max")),
        step=opt(rng.get("step")),
    )


def read_device(raw: Mapping[str, Any], driver: str, pool: str, node: str) -> Device:
    capacity, policies = {}, {}
    for name, cap in (raw.get("capacity") or {}).items():
        capacity[qualified(name, driver)] = quantity_int(cap["value"])
        policy = _policy(cap.get("requestPolicy"))
        if policy is not None:
            policies[qualified(name, driver)] = policy
    return Device(
        driver=driver,
        pool=pool,
        name=raw["name"],
        node=node,
        attributes={
            qualified(name, driver): _attribute(value)
            for name, value in (raw.get("attributes") or {}).items()
        },
        capacity=capacity,
        consumes=tuple(
            (c["counterSet"], _counters(c.get("counters")))
            for c in raw.get("consumesCounters") or ()
        ),
        multiple=bool(raw.get("allowMultipleAllocations")),
        policies=policies,
        taints=tuple(
            (t.get("key", ""), t.get("value", ""), t.get("effect", ""))
            for t in raw.get("taints") or ()
        ),
    )


def read_slices(slices: Iterable[Obj]) -> Inventory:
    """Devices and counters of the newest generation of every pool."""
    pools: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for s in slices:
        spec = s.get("spec") or {}
        pools[(spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))].append(spec)

    devices: dict[tuple[str, str, str], Device] = {}
    counters: dict[CounterKey, Mapping[str, int]] = {}
    incomplete: set[tuple[str, str]] = set()
    skipped: list[str] = []
    for (driver, pool), specs in sorted(pools.items()):
        newest = max(int(s["pool"].get("generation", 0)) for s in specs)
        current = [s for s in specs if int(s["pool"].get("generation", 0)) == newest]
        if len(current) < max(int(s["pool"].get("resourceSliceCount", 1)) for s in current):
            # A driver mid-publication: what is there is real; the rest is not known yet.
            incomplete.add((driver, pool))
        for spec in current:
            for cs in spec.get("sharedCounters") or ():
                try:
                    counters.setdefault((driver, pool, cs["name"]), _counters(cs.get("counters")))
                except (KeyError, ValueError, TypeError, AttributeError) as e:
                    skipped.append(f"{driver}/{pool} counter set {cs.get('name')}: {e!r}")
            per_device = bool(spec.get("perDeviceNodeSelection"))
            for raw in spec.get("devices") or ():
                node = (raw.get("nodeName") if per_device else spec.get("nodeName")) or ""
                if not node:
                    # TODO: devices reachable from several nodes (nodeSelector, allNodes):
                    # Shoal only allocates node-local GPUs for now.
                    continue
                try:
                    device = read_device(raw, driver, pool, node)
                except (KeyError, ValueError, TypeError, AttributeError) as e:
                    # The API server validates slices; one odd device still must not
                    # stop the read of all the others.
                    skipped.append(f"{driver}/{pool}/{raw.get('name', '?')}: {e!r}")
                    continue
                devices.setdefault(device.key, device)  # a duplicate name is invalid: first wins
    return Inventory(tuple(devices.values()), counters, frozenset(incomplete), tuple(skipped))
