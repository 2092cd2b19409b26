"""The Kubernetes backend's reads in one scheduler cycle at scale (not a test).

    .venv/bin/python -m bench.kube_reads [--nodes 1000] [--pods 10000]

Fills a `KubernetesBackend`'s Node and Pod caches directly (no API server; the objects
are shaped like real ones, managedFields included, and go through the reflector's
`slim`) and times what the loop calls each cycle: `nodes()`, `workers()`,
`foreign_requests()`, `foreign_running()`; plus, for comparison, one deep copy of the pod
cache, which every `items()` call made before (several per cycle). The pod index (the
reflector's listener) is filled as a relist would (`reset`, timed) and then kept by
events: the cost of one event (`update`, mean over every pod) is timed too.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

from scheduler.backends.kubernetes import KubeConfig, KubernetesBackend
from scheduler.backends.kubernetes.client.reflector import key_of, slim

Obj = dict[str, Any]


def node(i: int) -> Obj:
    return {
        "metadata": {
            "name": f"n{i}",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/gpu.count": "8",
            },
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}] * 4,
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int, nodes: int, shoal: bool) -> Obj:
    meta: Obj = {
        "name": f"p{i}",
        "namespace": "shoal-jobs" if shoal else f"team{i % 50}",
        "uid": f"uid-{i}",
        "labels": {"app": "x"},
        "annotations": {},
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}] * 6,
    }
    if shoal:
        job = f"job{i // 4}"
        meta["labels"].update(
            {
                "app.kubernetes.io/managed-by": "shoal",
                "app.kubernetes.io/component": "worker",
                "shoal.dev/job": job,
                "shoal.dev/queue": "vision",
                "shoal.dev/attempt": "1",
                "shoal.dev/worker-index": str(i % 4),
            }
        )
        meta["annotations"].update(
            {"shoal.dev/job-id": job, "shoal.dev/node": f"n{i % nodes}", "shoal.dev/gpus": "0"}
        )
    res = {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": f"n{i % nodes}",
            "schedulerName": "shoal" if shoal else "default-scheduler",
            "containers": [{"name": "worker", "image": "x", "resources": res}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "worker", "state": {"running": {}}}],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    b = KubernetesBackend(KubeConfig(host="http://127.0.0.1:9"), start=False)
    b.node_cache._items = {key_of(n): slim(n) for n in (node(i) for i in range(args.nodes))}
    pods = (pod(i, args.nodes, shoal=i % 10 < 3) for i in range(args.pods))
    b.pod_cache._items = {key_of(p): slim(p) for p in pods}
    t0 = time.perf_counter()
    b.index.reset(b.pod_cache._items)
    reset_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for key, obj in b.pod_cache._items.items():
        b.index.update(key, obj)
    event_s = (time.perf_counter() - t0) / max(1, len(b.pod_cache._items))
    steps: dict[str, Callable[[], object]] = {
        "nodes()": b.nodes,
        "workers()": b.workers,
        "foreign_requests()": b.foreign_requests,
        "foreign_running()": b.foreign_running,
        "deepcopy of the pod cache (before)": lambda: copy.deepcopy(
            list(b.pod_cache._items.values())
        ),
    }
    print(f"{args.nodes} nodes, {args.pods} pods (30% Shoal workers), best of {args.repeat}")
    cycle = 0.0
    for name, fn in steps.items():
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best = min(times)
        if "before" not in name:
            cycle += best
        print(f"  {name:40s} {best * 1000:8.1f} ms (median {statistics.median(times) * 1000:.1f})")
    print(f"  {'one cycle of backend reads':40s} {cycle * 1000:8.1f} ms")
    print(f"  {'pod index from a relist (once)':40s} {reset_s * 1000:8.1f} ms")
    print(f"  {'pod index, one watch event':40s} {event_s * 1e6:8.1f} us")
    b.close()


if __name__ == "__main__":
    main()
