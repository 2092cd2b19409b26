"""Fixtures for the Kubernetes backend tests: a fake API server per test, backends
pointed at it through the real `kubernetes` client, and builders of cluster objects."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.builders import launch_request as job  # noqa: F401  (the tests import it from here)
from support.draslices import gpu_class, gpu_slice
from support.wait import eventually  # noqa: F401

from scheduler.backends.kubernetes import KubeConfig, KubernetesBackend, api_client

from .fakeapi import FakeKube
from .loopkit import database, loop  # noqa: F401  (fixtures: the loop over the fake)

NS = "jobs"
POOL = {"key": "shoal.dev/pool", "value": "shoal", "effect": "NoSchedule"}  # Shoal's node pool
Obj = dict[str, Any]


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k
        # Every object Shoal wrote passed the official schemas.
        assert not k.invalid, k.invalid


@pytest.fixture
def config(kube: FakeKube) -> KubeConfig:
    return KubeConfig(
        namespace=NS,
        host=kube.url,
        # Generous: on a loaded machine an in-process server may answer slowly; a test
        # that needs a request to time out stalls it past its own, explicit, timeout.
        request_timeout_s=10.0,
        retry_deadline_s=3.0,
        retry_max_delay_s=0.2,
        watch_timeout_s=2,
        reconcile_interval_s=0.1,
        reservation_grace_s=0.0,
    )


@pytest.fixture
def make_backend(config: KubeConfig) -> Iterator[Callable[..., KubernetesBackend]]:
    made: list[KubernetesBackend] = []

    def make(**overrides: Any) -> KubernetesBackend:
        cfg = KubeConfig(**{**{f: getattr(config, f) for f in config.__slots__}, **overrides})
        b = KubernetesBackend(cfg, client=api_client(cfg), sync_timeout_s=60)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-A100-SXM4-80GB",
    gpu_memory: int = 81920,
    cpu: str = "64",
    memory: str = "512Gi",
    ready: bool = True,
    taints: list[Obj] | None = None,
    unschedulable: bool = False,
) -> Obj:
    labels = {"kubernetes.io/hostname": name}
    if gpus:
        labels.update(
            {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(gpu_memory),
                "nvidia.com/gpu.count": str(gpus),
            }
        )
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {"unschedulable": unschedulable}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    *,
    ns: str = "default",
    node_name: str = "",
    requests: dict[str, str] | None = None,
    phase: str = "Running",
    scheduler: str = "default-scheduler",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A pod someone else made."""
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "app", "image": "busybox", "resources": {"requests": requests or {}}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def env_of(pod_obj: Obj) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in pod_obj["spec"]["containers"][0]["env"]
    }


def dra_node(kube: FakeKube, name: str, *, pool: bool, gpus: int = 2) -> None:
    """A node with no device-plugin GPU whose `gpus` a DRA driver publishes; in Shoal's
    pool (labelled and tainted) or not."""
    obj = node(name, gpus=0, taints=[POOL] if pool else None)
    if pool:
        obj["metadata"]["labels"]["shoal.dev/pool"] = "shoal"
    kube.put("nodes", obj)
    kube.put("deviceclasses", gpu_class())
    for s in gpu_slice(name, gpus=gpus):
        kube.put("resourceslices", s)
