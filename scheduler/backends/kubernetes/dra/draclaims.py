"""GPUs a DRA driver publishes: what each node offers, and the claims of Shoal's workers.

Read from three caches (ResourceSlices, DeviceClasses, ResourceClaims) and worked out
again only when one of them moved. A node whose devices of the GPU DeviceClass appear
in a ResourceSlice counts its GPUs from DRA alone, never also from `nvidia.com/gpu`
(extended-resource mapping serves that name from the same devices). A GPU other
schedulers' claims leave nothing of (held whole, all its memory, every MIG slice) is not
offered (`dra.offered`); Shoal's own claims are its placements' and are counted by the
loop.

A worker on such a node gets a claim of its own (`claimobjects`), allocated here before
its pod is bound: the placement chose the node and how much of which GPU index; the
devices are chosen here (`dra.choose`) among those no claim holds, a fraction on the
device its GPU index already shares. Each step is idempotent: a launch cut short is
finished, and a device is never given twice (Shoal's own writes count before the cache
shows them).

Only on nodes of Shoal's pool (`nodepool`): elsewhere kube-scheduler allocates. And
every allocation written is checked at once against all claims as the API server holds
them after the write (`verify`: the claims cache once it has reached the write's
resourceVersion, which then holds every claim committed before the write, as a LIST
after it would; a LIST where the cache lags); a device also in another claim (another
allocator on the node: a misconfigured cluster) has Shoal's allocation released before
the pod is bound, and the launch fails with why (`DraConflict`), to be placed again.
Launches run in parallel: a claim's devices are chosen and assumed under one lock, and
written outside it (`allocate`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import dra, names, nodepool
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.backends.kubernetes.client.objects import ensure
from scheduler.backends.kubernetes.client.reflector import Reflector, as_version, key_of
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.dra import claimobjects
from scheduler.model import Enforcement

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# A claim's status with no allocation: how Shoal gives back what it wrote.
RELEASED: Obj = {"status": {"allocation": None, "reservedFor": None}}
# A claim chosen and not yet written (`DraClaims._assume`): kept above any version.
ASSUMED = sys.maxsize
# How long the check after an allocation waits for the claims cache to reach the write
# before it reads every claim from the API server instead.
VERIFY_WAIT_S = 5.0


class DraUnfit(base.BackendError):
    """No device on the chosen node satisfies the worker's claim (the job's reason)."""


class DraConflict(DraUnfit):
    """A device Shoal just allocated is in another claim too: Shoal released its own
    allocation; the pod is placed again (another allocator works on the node)."""


@dataclass(frozen=True)
class DraState:
    nodes: dict[str, dra.NodeGpus]  # node -> its GPUs of the GPU DeviceClass
    usage: dra.Usage  # every claim's allocation, Shoal's own included
    foreign: dra.Usage  # other schedulers' claims only
    claims: dict[str, Obj]  # every claim by namespace/name, Shoal's writes on top


@dataclass(frozen=True)
class NodeOffer:
    """What a DRA node offers the placement (see `DraClaims.offer`)."""

    gpus: int
    total: int  # every GPU, held or not (admission's "could it ever run")
    model: str
    memory_mib: int
    enforcement: Enforcement
    no_sharing: str
    withheld: str = ""  # why none of its GPUs is offered (outside Shoal's pool)


class DraClaims:
    def __init__(
        self,
        kube: Kube,
        config: KubeConfig,
        slices: Reflector,
        classes: Reflector,
        claims: Reflector,
        nodes: Callable[[str], Obj | None] = lambda name: None,
    ) -> None:
        self.kube, self.config = kube, config
        self.slices, self.classes, self.claims = slices, classes, claims
        self.nodes = nodes  # a Node object by name (the node cache), for the pool's label
        self._classes = dra.DeviceClasses()
        self._lock = threading.Lock()
        self._choosing = threading.Lock()  # one claim's devices chosen and assumed at a time
        self._memo: tuple[tuple[str, str, str, int], DraState] | None = None
        self._foreign: tuple[tuple[str, str, str], dra.Usage] | None = None  # by versions
        # (slices and classes versions, their inventory, each node's GPUs)
        self._devices: tuple[tuple[str, str], dra.Inventory, dict[str, dra.NodeGpus]] | None = None
        # claim key -> (resourceVersion, the claim) as Shoal last wrote it: the cache
        # may not show it yet, and a device must not be chosen twice meanwhile.
        self._written: dict[str, tuple[int, Obj]] = {}
        self._generation = 0  # moves with every change to `_written` (`state`'s memo)
        self._pruned_at = ""  # the claims cache's version `_written` was last pruned at

    # ---- reading ----

    def state(self) -> DraState:
        """The devices and what holds them, worked out again only in the part that moved:
        slices and classes (the inventory and each node's GPUs) apart from claims (what
        is in use), which every allocation moves."""
        with self._lock:
            seen = self.claims.resource_version
            if seen != self._pruned_at:  # what the cache now shows need not be kept
                kept = {k: w for k, w in self._written.items() if w[0] > as_version(seen)}
                if len(kept) != len(self._written):
                    self._written, self._generation = kept, self._generation + 1
                self._pruned_at = seen
            devices_key = (self.slices.resource_version, self.classes.resource_version)
            if self._devices is None or self._devices[0] != devices_key:
                inventory = dra.read_slices(self.slices.items())
                self._classes.update(self.classes.items())
                nodes = dra.node_gpus(
                    inventory, self._classes, self.config.dra_gpu_class, self.config.dra_mig_class
                )
                self._devices = (devices_key, inventory, nodes)
            _, inventory, nodes = self._devices
            key = (*devices_key, seen, self._generation)
            if self._memo is not None and self._memo[0] == key:
                return self._memo[1]
            cached = self.claims.items()
            claims = {key_of(c): c for c in cached}
            claims.update({k: w[1] for k, w in self._written.items()})
            if self._foreign is None or self._foreign[0] != key[:3]:
                # Shoal's own writes are never foreign: only the cache moves these.
                foreign = dra.Usage.from_claims(cached, inventory, exclude=names.is_managed)
                self._foreign = (key[:3], foreign)
            usage = dra.Usage.from_claims(claims.values(), inventory)
            state = DraState(nodes=nodes, usage=usage, foreign=self._foreign[1], claims=claims)
            self._memo = (key, state)
            return state

    def _inventory(self) -> dra.Inventory:
        """The devices as last read (the check after an allocation needs no usage)."""
        with self._lock:
            devices = self._devices
        return devices[1] if devices is not None else self.state().usage.inventory

    def offer(self, node: str, state: DraState | None = None) -> NodeOffer | None:
        """What `node` offers when a DRA driver publishes its GPUs, else None: the GPUs
        no other scheduler's claim holds, their model and memory, and how a fraction
        is held there (a MIG slice: enforced; a share of a device shared by capacity:
        advisory; neither: no fractions, and why). `state`: one `state()` for a pass
        over every node (launches move it meanwhile)."""
        state = state or self.state()
        gpus = state.nodes.get(node)
        if gpus is None or not gpus.gpus:
            return None
        free = dra.offered(gpus, state.foreign)
        first = gpus.gpus[0]
        if gpus.migs:
            how, why = Enforcement.ENFORCED, ""
        elif gpus.shareable:
            how, why = Enforcement.ADVISORY, ""
        else:
            how = Enforcement.ADVISORY
            why = "its DRA GPUs are neither shared by capacity nor partitionable (MIG)"
        return NodeOffer(len(free), len(gpus.gpus), first.model, first.memory_mib, how, why)

    def may_allocate(self, node: str) -> bool:
        """May Shoal allocate DRA devices on `node` (`nodepool.may_allocate`)?"""
        return nodepool.may_allocate(self.nodes(node), self.config)

    def dra_nodes(self) -> list[str]:
        """The nodes whose GPUs a DRA driver publishes."""
        return sorted(n for n, g in self.state().nodes.items() if g.gpus)

    # ---- allocating ----

    def allocate(self, pod: Obj) -> bool:
        """Make `pod`'s claim and allocate it for the pod, unless that is done. False
        while another thread writes its allocation (the pod is not to be bound yet).
        Raises `DraUnfit` when no device fits.

        Launches run in parallel (`launchpool`): the devices are chosen one claim at a
        time and assumed at once (they count in `state()` before any write, so no
        other launch chooses them), then written; a write that fails forgets them."""
        ann, meta = names.annotations_of(pod), pod["metadata"]
        key = f"{meta['namespace']}/{ann[names.DRA_CLAIM]}"
        with self._choosing:
            state = self.state()
            if self._assumed(key):
                return False
            found = state.claims.get(key)
            if found is not None and claimobjects.reserved_for(found, pod):
                return True
            if found is not None and claimobjects.owner_uid(found) != meta.get("uid"):
                # An earlier pod of that name owned it: the garbage collector takes it away.
                err = base.BackendError(
                    f"ResourceClaim {key} is an earlier pod's; waiting for it to go"
                )
                err.transient = True
                raise err
            node = ann.get(names.NODE, "")
            if not self.may_allocate(node):  # placed before the node left the pool
                raise DraUnfit(nodepool.outside_reason(node, self.config))
            gpus = state.nodes.get(node)
            if gpus is None:
                raise DraUnfit(
                    f"node {node} publishes no device of DeviceClass {self.config.dra_gpu_class}"
                )
            indices = names.parse_gpus(ann.get(names.GPUS, ""))
            fraction = float(ann.get(names.GPU_FRACTION, "1"))
            choice = self._choose(state, gpus, indices, fraction)
            if isinstance(choice, dra.Unfit):
                raise DraUnfit(choice.reason)
            made = self._claim_for(pod, choice, indices[0] if fraction < 1 else None)
            devices = [(claimobjects.REQUEST, d.key, _local(c, d)) for d, c in choice]
            unmade = {**made, "metadata": {"uid": "", **made["metadata"]}}  # no uid yet
            self._assume(key, made, claimobjects.allocation(found or unmade, pod, node, devices))
        try:
            if found is None:
                found = ensure(self.kube, "resourceclaims", made, ann.get(names.JOB_ID, ""))
            written = self.write_status(key, claimobjects.allocation(found, pod, node, devices))
        except BaseException:
            self._forget(key)
            raise
        if written:
            self.verify([key], node)
        return True

    def verify(self, keys: Sequence[str], node: str) -> None:
        """The check after an allocation Shoal wrote: every claim as the API server
        holds it once the write is in (the claims cache at the write's resourceVersion
        or later, else a consistent LIST when the cache lags `VERIFY_WAIT_S`); if a
        device of `keys` is also in another claim (another allocator on the node),
        release `keys`' allocations (before their pod is bound) and raise `DraConflict`
        with why."""
        with self._lock:
            versions = [self._written[k][0] for k in keys if k in self._written]
        if versions and self.claims.wait_for(max(versions), VERIFY_WAIT_S):
            claims = {key_of(c): c for c in self.claims.items()}
        else:
            items, _ = self.kube.list("resourceclaims")
            claims = {key_of(c): c for c in items}
        inventory = self._inventory()
        why = [line for k in keys for line in dra.overbooked(claims, inventory, k)]
        if not why:
            return
        for k in keys:
            self.write_status(k, RELEASED)
        said = "; ".join(why)
        log.warning("DRA devices on %s in two claims, released %s: %s", node, ", ".join(keys), said)
        raise DraConflict(
            f"node {node}: another scheduler allocated the same DRA device ({said}); Shoal "
            f"released its ResourceClaim {', '.join(keys)} before the bind, and places the "
            "pod again (is kube-scheduler allocating on Shoal's node pool? docs/kubernetes.md, "
            '"Beside kube-scheduler, Kueue and KAI")'
        )

    def write_status(self, key: str, body: Obj) -> bool:
        """Write a claim's allocation; it counts from now on, before the cache shows it.
        False: the claim is gone (its pod went and took it along: nothing left to do)."""
        namespace, name = key.split("/", 1)
        try:
            written = self.kube.patch("resourceclaims/status", name, body, namespace)
        except ApiError as e:
            if e.status != 404:
                raise
            self._forget(key)
            return False
        with self._lock:
            self._written[key] = (as_version(written["metadata"].get("resourceVersion")), written)
            self._generation += 1
        return True

    def _assume(self, key: str, claim: Obj, allocation: Obj) -> None:
        """Count `claim` allocated as `allocation` says from now on, before its writes."""
        with self._lock:
            self._written[key] = (ASSUMED, {**claim, **allocation})
            self._generation += 1

    def _assumed(self, key: str) -> bool:
        with self._lock:
            return self._written.get(key, (0,))[0] == ASSUMED

    def _forget(self, key: str) -> None:
        """An assumption whose writes failed no longer counts."""
        with self._lock:
            if self._written.get(key, (0,))[0] == ASSUMED:
                del self._written[key]
                self._generation += 1

    def device_classes(self) -> dra.DeviceClasses:
        """The DeviceClasses as `state()` last read them."""
        self.state()
        return self._classes

    def _choose(
        self, state: DraState, gpus: dra.NodeGpus, indices: tuple[int, ...], fraction: float
    ) -> dra.Choice | dra.Unfit:
        """`dra.choose` at the placement's GPU indices (index i: the i-th GPU other
        schedulers leave). Whole GPUs whose index moved (another scheduler's claim came
        or went since the placement) are taken from those still free instead."""
        offered = dra.offered(gpus, state.foreign)
        held = self._held(state, gpus)
        choice = dra.choose(gpus, state.usage, indices, fraction, held, gpus=offered)
        if isinstance(choice, dra.Choice) or fraction < 1:
            return choice
        free = [i for i, g in enumerate(offered) if state.usage.is_free(g.device)]
        if len(free) < len(indices):
            return choice
        return dra.choose(gpus, state.usage, free[: len(indices)], 1.0, held, gpus=offered)

    def _claim_for(self, pod: Obj, choice: dra.Choice, index: int | None) -> Obj:
        """The claim's spec says what was chosen: the class, how many, how much of a
        shared device, and a MIG slice's profile."""
        devices = choice.devices
        first, consumed = devices[0]
        cls, selectors = self.config.dra_gpu_class, tuple[str, ...]()
        if choice.mig_profile:
            cls = self.config.dra_mig_class
            attr = f'device.attributes["{first.driver}"].profile'
            selectors = (f'{attr} == "{choice.mig_profile}"',)
        capacity = _local(consumed, first)
        return claimobjects.claim(
            pod,
            device_class=cls,
            count=len(devices),
            capacity=capacity,
            selectors=selectors,
            gpu_index=index,
        )

    def _held(self, state: DraState, gpus: dra.NodeGpus) -> dict[int, dra.Device]:
        """GPU index -> the device Shoal's fractions at that index use on the node (a
        MIG slice: its GPU is its parent), so that a share goes where the placement put
        it, next to the others of that index."""
        out: dict[int, dra.Device] = {}
        inventory = state.usage.inventory
        for c in state.claims.values():
            ann = names.annotations_of(c)
            index = ann.get(names.GPU_INDEX)
            if index is None or not names.is_managed(c) or ann.get(names.NODE) != gpus.node:
                continue
            for k in claimobjects.allocated_devices(c):
                device = inventory.by_key.get(k)
                if device is not None:
                    out[int(index)] = device
        return out


def _local(consumed: Mapping[str, int] | None, device: dra.Device) -> dict[str, int] | None:
    """Capacity names as the driver's slice spells them: its own domain left out."""
    if consumed is None:
        return None
    out = {}
    for name, amount in consumed.items():
        domain, ident = dra.split_qualified(name)
        out[ident if domain in ("", device.driver) else name] = amount
    return out
