"""The cluster's nodes as the scheduler sees them, read from the Node cache.

A node whose object and foreign usage are unchanged since the last read is not worked
out again: the cache replaces an object on every change, never mutates it. Shoal's node
pool's taint is no bar to Shoal's pods (`nodepool`); a DRA node outside the pool offers
none of its GPUs (kube-scheduler allocates them), and says so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.backends.kubernetes import nodepool
from scheduler.backends.kubernetes.client.reflector import Reflector
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.dra.draclaims import DraClaims, DraState, NodeOffer
from scheduler.backends.kubernetes.reservations import shares
from scheduler.backends.kubernetes.view import inventory, podindex
from scheduler.model import Node

Obj = dict[str, Any]


class NodeView:
    def __init__(
        self,
        node_cache: Reflector,
        index: podindex.PodIndex,
        reservations: shares.Reservations,
        claims: DraClaims | None = None,
        config: KubeConfig | None = None,
    ) -> None:
        self.node_cache, self.index, self.reservations = node_cache, index, reservations
        self.claims = claims
        self.config = config or KubeConfig()
        # node name -> (Node object, foreign usage, DRA offer, what nodes() made of them)
        self._node_memo: dict[
            str, tuple[Obj, tuple[int, int, int], NodeOffer | None, Node | None]
        ] = {}
        self._capacity = inventory.Capacity()

    def nodes(self) -> list[Node]:
        """`inventory.schedulable_nodes`, from the index's foreign totals; a node whose
        object and foreign usage are unchanged since the last call is not worked out
        again (the cache replaces an object on every change, never mutates it)."""
        used = self.index.usage()
        memo: dict[str, tuple[Obj, tuple[int, int, int], NodeOffer | None, Node | None]] = {}
        state = self.claims.state() if self.claims is not None else None
        for n in self.node_cache.items():
            name = n["metadata"]["name"]
            u = used.get(name, (0, 0, 0))
            offer = self._offer(n, state)
            hit = self._node_memo.get(name)
            if hit is not None and hit[0] is n and hit[1] == u and hit[2] == offer:
                memo[name] = hit
                continue
            ok = inventory.unschedulable_reason(n, dra=offer is not None) is None
            node = nodepool.without_taint(_offered(n, u, offer), self.config) if ok else None
            memo[name] = (n, u, offer, node)
        self._node_memo = memo
        # A reservation found no GPU there: no fractions, whole GPUs still (issue 24).
        no_gpu = self.reservations.excluded()
        out = [m[3] for m in memo.values() if m[3] is not None]
        out = [replace(n, no_sharing=no_gpu[n.name]) if n.name in no_gpu else n for n in out]
        return sorted(out, key=lambda n: n.name)

    def _offer(self, node: Obj, state: DraState | None) -> NodeOffer | None:
        """What a DRA driver offers on `node` (None: its GPUs come from the device
        plugin); outside Shoal's pool none of its GPUs, and why (`nodepool`)."""
        name = node["metadata"]["name"]
        offer = self.claims.offer(name, state) if self.claims is not None else None
        if offer is None or nodepool.may_allocate(node, self.config):
            return offer
        why = nodepool.outside_reason(node["metadata"]["name"], self.config)
        return replace(offer, gpus=0, withheld=why)

    def capacity(self) -> list[Node]:
        """Every node as if empty, cordoned and NotReady ones too (`inventory.Capacity`)."""
        nodes = self._capacity(self.node_cache.items())
        if self.claims is None:
            return nodes
        out, state = [], self.claims.state()
        for n in nodes:
            offer = self.claims.offer(n.name, state)
            if offer is not None:
                n = replace(n, gpu_count=offer.total, gpu_model=offer.model)
                n = replace(n, gpu_memory_mib=offer.memory_mib, slices=0)
            out.append(n)
        return out

    def mps_replicas(self, node: str) -> int:
        """N when `node`'s device plugin shares each GPU as N MPS replicas, else 0."""
        hit = self._node_memo.get(node)  # the node as the last `nodes()` (the cycle's) saw it
        if hit is None:
            obj = next((n for n in self.node_cache.items() if n["metadata"]["name"] == node), None)
            return inventory.mps_replicas(obj) if obj is not None else 0
        return inventory.mps_replicas(hit[0])

    def dra(self, node: str) -> NodeOffer | None:
        """What a DRA driver offers on `node`, as the last `nodes()` saw it; None: its
        GPUs come from the device plugin."""
        hit = self._node_memo.get(node)
        return hit[2] if hit is not None else None

    def excluded_nodes(self) -> dict[str, str]:
        """node -> why Shoal does not offer it (cordoned, a taint, NotReady, shared
        devices it cannot count), why it offers none of its GPUs (DRA devices outside
        Shoal's pool), or why it offers no fractions there (a reservation's GPU did not
        reach its container; its whole GPUs are still offered)."""
        out = {}
        no_gpu = self.reservations.excluded()
        state = self.claims.state() if self.claims is not None else None
        for n in self.node_cache.items():
            name = n["metadata"]["name"]
            offer = self._offer(n, state)
            withheld = offer.withheld if offer is not None else ""
            reason = inventory.unschedulable_reason(n) or withheld or no_gpu.get(name)
            if reason:
                out[name] = reason
        return out

    def gpu_counts(self) -> dict[str, int]:
        """node -> its GPUs, as the last `nodes()` saw them (offered nodes only)."""
        return {n: m[3].gpu_count for n, m in self._node_memo.items() if m[3] is not None}


def _offered(node: Obj, used: tuple[int, int, int], offer: NodeOffer | None) -> Node:
    """`inventory.to_node`; where a DRA driver publishes the node's GPUs, they are
    counted from its devices alone (not `nvidia.com/gpu`, nor pods' requests of it)."""
    if offer is None:
        return inventory.to_node(node, used)
    return replace(
        inventory.to_node(node, (used[0], used[1], 0)),
        gpu_count=offer.gpus,
        gpu_model=offer.model,
        gpu_memory_mib=offer.memory_mib,
        enforcement=offer.enforcement,
        slices=0,
        no_sharing=offer.no_sharing,
        withheld=offer.withheld,
    )
