"""The Kubernetes cluster backend (the only package that imports `kubernetes`).

`KubernetesBackend` implements `scheduler.backends.base.ClusterBackend` on a real
cluster; `LeaderElector` picks the one replica that drives it; `reserve.main` is the
process of a GPU reservation pod. See docs/kubernetes.md.
"""

from scheduler.backends.kubernetes.api import ApiError, Kube, Unavailable
from scheduler.backends.kubernetes.backend import KubernetesBackend
from scheduler.backends.kubernetes.config import KubeConfig, api_client
from scheduler.backends.kubernetes.leader import LeaderElector
from scheduler.backends.kubernetes.status import Allocation, ForeignPod

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
