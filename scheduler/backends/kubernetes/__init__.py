"""The Kubernetes cluster backend (the only package that imports `kubernetes`).

`KubernetesBackend` implements `scheduler.backends.base.ClusterBackend` on a real
cluster; `LeaderElector` picks the one replica that drives it; `reservations.reserve` is
the process of a GPU reservation pod. See docs/kubernetes.md.

The package is in rooms, each a layer over the ones after it (`pyproject.toml` checks
it): `runtime`, `backend` and its `upkeep` and `nodeview` at the top; `foreignpods`
(pods Shoal did not create that name it as their scheduler, and their gangs and claims);
`pods` (Shoal's own workers: the pod, launching and stopping, binding, resizing, gangs,
evictions); `reservations` (reservation pods and the shares of a GPU); `view` (what
Shoal reads of nodes and pods: inventory, status, the pod index, kube-scheduler's fit
rules); `dra` (DRA devices, pure, and the claims of Shoal's workers); `client` (the API
server: calls, errors, caches, events, leader election); then `nodepool`, `config` and
`names`.

The names below are imported on first use (PEP 562), so that the reservation pod's
`python -m scheduler.backends.kubernetes.reservations.reserve` loads neither the `kubernetes` client
nor the rest of Shoal: it runs under a small memory limit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.backends.kubernetes.backend import KubernetesBackend
    from scheduler.backends.kubernetes.client.api import Kube
    from scheduler.backends.kubernetes.client.apierrors import ApiError, Unavailable
    from scheduler.backends.kubernetes.client.leader import LeaderElector
    from scheduler.backends.kubernetes.config import KubeConfig, api_client
    from scheduler.backends.kubernetes.view.status import Allocation, ForeignPod

_WHERE = {
    "Allocation": "view.status",
    "ApiError": "client.apierrors",
    "ForeignPod": "view.status",
    "Kube": "client.api",
    "KubeConfig": "config",
    "KubernetesBackend": "backend",
    "LeaderElector": "client.leader",
    "Unavailable": "client.apierrors",
    "api_client": "config",
}

__all__ = [
    "Allocation",
    "ApiError",
    "ForeignPod",
    "Kube",
    "KubeConfig",
    "KubernetesBackend",
    "LeaderElector",
    "Unavailable",
    "api_client",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
