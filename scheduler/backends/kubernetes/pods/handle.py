"""What the backend hands each of its collaborators (kube-scheduler's `framework.Handle`
is the model): the client and the configuration, the pod cache and its index, the
reservations, the Event recorder, the binder, the backend's lock and each node's MPS
replicas. Made once by the backend; a collaborator takes it and names only what is its
own beside it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.reflector import Reflector
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.pods.podbinder import PodBinder
from scheduler.backends.kubernetes.reservations import shares
from scheduler.backends.kubernetes.view import podindex


@dataclass(frozen=True, slots=True)
class Handle:
    kube: Kube
    config: KubeConfig
    pod_cache: Reflector
    index: podindex.PodIndex
    reservations: shares.Reservations
    recorder: events.Recorder
    binder: PodBinder
    lock: threading.RLock  # launch, stop and reconcile never interleave
    mps_replicas: Callable[[str], int]  # a node's MPS replicas per GPU
