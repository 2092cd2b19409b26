"""The Kubernetes cluster backend (the only package that imports `kubernetes`).

`KubernetesBackend` implements `scheduler.backends.base.ClusterBackend` on a real
cluster; `LeaderElector` picks the one replica that drives it; `reserve` is the process
of a GPU reservation pod. See docs/kubernetes.md.

The names below are imported on first use (PEP 562), so that the reservation pod's
`python -m scheduler.backends.kubernetes.reserve` loads neither the `kubernetes` client
nor the rest of Shoal: it runs under a small memory limit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.backends.kubernetes.api import Kube
    from scheduler.backends.kubernetes.apierrors import ApiError, Unavailable
    from scheduler.backends.kubernetes.backend import KubernetesBackend
    from scheduler.backends.kubernetes.config import KubeConfig, api_client
    from scheduler.backends.kubernetes.leader import LeaderElector
    from scheduler.backends.kubernetes.status import Allocation, ForeignPod

_WHERE = {
    "Allocation": "status",
    "ApiError": "apierrors",
    "ForeignPod": "status",
    "Kube": "api",
    "KubeConfig": "config",
    "KubernetesBackend": "backend",
    "LeaderElector": "leader",
    "Unavailable": "apierrors",
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
