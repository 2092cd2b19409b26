"""Foreign pods against what every node's pods hold, for what the scheduling core does not
count: the rest of kube-scheduler's NodeResourcesFit (extended resources, hugepages-*,
MIG profiles, ephemeral-storage, the node's pod count) and NodePorts.

While the waiting pods are listed (`view`), the nodes where a pod does not fit are
excluded from its placement through its `NodeRules.excluded`, with kube-scheduler's
reason ("Insufficient example.com/rdma", "didn't have free ports for the requested pod
ports"). Every pod on a node counts: Shoal's workers and reservations, adopted pods, other
schedulers' pods. The core places each pod against that reading, not against the other
pods of the same cycle, so `admit` checks each bind again against the node's pods and
the binds Shoal made since (promised until the pod cache shows them): of two pods of one
cycle asking one host port, the second is refused and placed again in the next cycle.

Called by `foreign.ForeignBindings`.
"""

from __future__ import annotations

import threading
from typing import Any

from scheduler.backends.kubernetes.client.reflector import Reflector
from scheduler.backends.kubernetes.view import podfit
from scheduler.backends.kubernetes.view.podindex import PodIndex
from scheduler.backends.kubernetes.view.status import ForeignPod
from scheduler.model import NodeRules

Obj = dict[str, Any]
Key = tuple[tuple[tuple[str, int], ...], tuple[podfit.Port, ...]]


class Fits:
    """One reading of every node's room, for the waiting pods of one listing."""

    def __init__(self, alloc: dict[str, dict[str, int]], held: dict[str, podfit.Held]) -> None:
        self.alloc, self.held = alloc, held
        self._memo: dict[Key, NodeRules | None] = {}

    def rules(self, ask: podfit.Ask) -> NodeRules | None:
        """The nodes `ask` does not fit, by kube-scheduler's reason; None: it fits all.
        Pods that ask the same beyond cpu, memory and GPUs share one answer (most ask
        nothing more: one pass over the nodes for all of them)."""
        key = (tuple(r for r in ask.resources if r[0] not in podfit.MODELLED), ask.ports)
        if key in self._memo:
            return self._memo[key]
        out: dict[str, set[str]] = {}
        empty = podfit.Held()
        for node, alloc in self.alloc.items():
            why = podfit.refusal(ask, alloc, self.held.get(node, empty))
            if why is not None:
                out.setdefault(why, set()).add(node)
        got = NodeRules(excluded=tuple((w, frozenset(n)) for w, n in sorted(out.items())))
        self._memo[key] = got if out else None
        return self._memo[key]


class NodeFit:
    def __init__(self, node_cache: Reflector, index: PodIndex) -> None:
        self.node_cache, self.index = node_cache, index
        self._lock = threading.Lock()
        # node -> (its object, its allocatable): the cache replaces objects, never mutates
        self._alloc: dict[str, tuple[Obj, dict[str, int]]] = {}
        # cache key -> (uid, node, ask) of a pod Shoal is binding, until the cache shows it
        self._promised: dict[str, tuple[str, str, podfit.Ask]] = {}

    def _allocatable(self) -> dict[str, dict[str, int]]:
        memo = {}
        for n in self.node_cache.items():
            name = n["metadata"]["name"]
            hit = self._alloc.get(name)
            memo[name] = hit if hit is not None and hit[0] is n else (n, podfit.allocatable(n))
        with self._lock:
            self._alloc = memo
        return {name: m[1] for name, m in memo.items()}

    def _promises(self, skip: str = "") -> list[tuple[str, podfit.Ask]]:
        """(node, ask) of the binds the cache does not show yet; the rest are dropped
        (the pod is bound or placed there in the cache, gone, or another pod now)."""
        out = []
        with self._lock:
            for key, (uid, node, ask) in list(self._promised.items()):
                now = self.index.holder(key)
                if now is None or now[0] != uid or now[1] is not None:
                    del self._promised[key]
                elif key != skip:
                    out.append((node, ask))
        return out

    def view(self) -> Fits:
        """Every node's allocatable and what its pods hold (promises read first: a pod
        the cache shows meanwhile is counted twice for a moment, never missed)."""
        promised = self._promises()
        held = self.index.held()
        for node, ask in promised:
            held.setdefault(node, podfit.Held()).add(ask)
        return Fits(self._allocatable(), held)

    def admit(self, key: str, pod: ForeignPod, node: str) -> str | None:
        """Why `pod` (cache key `key`) may not be bound to `node` now, in kube-scheduler's
        words, or None: then its room there is promised until the cache shows it (or
        `forget`). A node that is gone is no reason here (the bind fails on its own)."""
        alloc = self._allocatable().get(node)
        if alloc is None:
            return None
        promised = [a for n, a in self._promises(skip=key) if n == node]
        held = self.index.held_on(node)
        for a in promised:
            held.add(a)
        why = podfit.refusal(pod.ask, alloc, held)
        if why is None:
            with self._lock:
                self._promised[key] = (pod.uid, node, pod.ask)
        return why

    def forget(self, key: str) -> None:
        """The bind of `key` failed: its room is free again."""
        with self._lock:
            self._promised.pop(key, None)
