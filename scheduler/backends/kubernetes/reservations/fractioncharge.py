"""A GPU fraction charged where Kubernetes counts it: `shoal.dev/gpu-milli`.

A fraction that a reservation pod holds (`shares`) requests no `nvidia.com/gpu`: the
reservation, in Shoal's reservations namespace, holds the GPU for every share of it. So
that the team's namespace is charged for its share (`kubectl describe quota` shows
`requests.shoal.dev/gpu-milli`), the worker requests (and is limited to) its fraction
in thousandths of a GPU, an extended resource Shoal advertises on the node (1000 per
GPU, in the node's status, as Kubernetes documents for extended resources) before the
first such worker is made there. Shares of a GPU never add up to more than one, so the
advertised amount never runs out before the GPUs do.

Whole GPUs are charged as `requests.nvidia.com/gpu`, an MPS replica as one of those,
and DRA claims per device class (ResourceQuota's own rules).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.view import inventory, podfit

log = logging.getLogger(__name__)
Obj = dict[str, Any]
RESOURCE = "shoal.dev/gpu-milli"


def milli(fraction: float) -> int:
    """A share in thousandths of a GPU (at least one: a share is never free)."""
    return max(1, round(fraction * 1000))


def advertised(node: Obj) -> int:
    """What the node should advertise: 1000 per GPU it has."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    return int(podfit.quantity(capacity.get(inventory.GPU, 0))) * 1000


class Advertiser:
    """Patches a node's status with `RESOURCE` when it lacks it (or it is stale), once
    per node and amount: the node cache may lag the patch."""

    def __init__(self, kube: Kube, nodes: Callable[[str], Obj | None]) -> None:
        self.kube, self.nodes = kube, nodes
        self._done: dict[str, str] = {}  # node -> the amount patched
        self._lock = threading.Lock()

    def ensure(self, name: str) -> None:
        """Raises ApiError when the patch is refused (the chart grants nodes/status)."""
        node = self.nodes(name)
        if node is None:
            return  # gone: the pod's bind fails and the attempt with it
        want = str(advertised(node))
        status = node.get("status") or {}
        have = [(status.get(part) or {}).get(RESOURCE) for part in ("capacity", "allocatable")]
        with self._lock:
            if have == [want, want] or self._done.get(name) == want:
                return
        patch = {"status": {part: {RESOURCE: want} for part in ("capacity", "allocatable")}}
        self.kube.patch("nodes/status", name, patch)
        log.info("node %s advertises %s=%s", name, RESOURCE, want)
        with self._lock:
            self._done[name] = want
