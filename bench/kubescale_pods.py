"""kube_scale (a): single-GPU pods created from several processes, timed from the first
create to the last bind on a watch (Shoal and kube-scheduler alike)."""

from __future__ import annotations

import json
import multiprocessing
import os
import ssl
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.kubescale_cluster import NS, BindWatch, Cluster


def pod_body(i: int, scheduler: str, claim_template: str | None = None) -> bytes:
    """A single-GPU pod: `nvidia.com/gpu: 1`, or with `claim_template` one DRA claim
    made from that ResourceClaimTemplate (and no `nvidia.com/gpu`)."""
    pod: dict[str, Any] = {
        "metadata": {"name": f"p{i:05d}", "labels": {"shoal.dev/queue": "bench"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "name": "c", "image": "busybox",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }],
        },
    }  # fmt: skip
    if claim_template:
        pod["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": claim_template}
        ]
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "claims": [{"name": "gpu"}],
        }
    return json.dumps(pod).encode()


def create_pods(
    server: str,
    certs: str,
    scheduler: str,
    indices: list[int],
    threads: int,
    claim_template: str | None = None,
) -> dict[str, float]:
    """Create pods `indices` from `threads` threads, each with its own connection; runs
    in a creator process of its own (the watch's JSON parsing stays off its GIL).
    Returns pod name -> CLOCK_MONOTONIC when its create was answered (one clock for all
    processes on Linux)."""
    ctx = ssl.create_default_context(cafile=f"{certs}/ca.crt")
    ctx.load_cert_chain(f"{certs}/admin.crt", f"{certs}/admin.key")
    todo = iter(indices)
    lock = threading.Lock()
    created: dict[str, float] = {}
    url = f"/api/v1/namespaces/{NS}/pods"
    headers = {"Content-Type": "application/json"}

    def run() -> None:
        with httpx.Client(base_url=server, verify=ctx, timeout=60) as c:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                body = pod_body(i, scheduler, claim_template)
                for attempt in range(20):
                    r = c.post(url, content=body, headers=headers)
                    if r.status_code < 300 or r.status_code == 409:
                        break
                    if r.status_code not in (429, 500, 503, 504):
                        raise RuntimeError(f"POST {url}: {r.status_code} {r.text[:300]}")
                    time.sleep(0.2 * (attempt + 1))
                created[f"p{i:05d}"] = time.monotonic()

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return created


def single_gpu_pods(
    cluster: Cluster,
    n: int,
    scheduler: str,
    timeout: float,
    gpus: int,
    creators: int = 4,
    claim_template: str | None = None,
) -> dict[str, Any]:
    cluster.namespace(NS)
    watch = BindWatch(cluster, NS)
    time.sleep(1)
    created: dict[str, float] = {}
    # `creators` processes x 8 threads, so that creating pods does not set the rate.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(creators, mp_context=spawn) as ex:
        for w in [ex.submit(time.sleep, 1) for _ in range(creators)]:
            w.result()  # every creator process started before the clock does
        t0 = time.monotonic()
        parts = [
            ex.submit(create_pods, cluster.server, str(cluster.dir), scheduler,
                      list(range(k, n, creators)), 8, claim_template)
            for k in range(creators)
        ]  # fmt: skip
        for part in parts:
            created.update(part.result())
    # To the last create's answer (not counting the creator processes' shutdown).
    created_s = (max(created.values()) if created else time.monotonic()) - t0
    print(f"{scheduler}: {n} pods created in {created_s:.1f} s", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout
    while len(watch.bound) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    watch.stop.set()
    with watch.lock:
        times = sorted(watch.bound.values())
        waits = sorted(t - created[k] for k, t in watch.bound.items() if k in created)
        seen = {
            f"{NS}/{k}": {"created": created.get(k), "watched": t} for k, t in watch.bound.items()
        }
        per_node: dict[str, int] = {}
        for p in watch.pods.values():
            node = p["spec"].get("nodeName")
            if node:
                per_node[node] = per_node.get(node, 0) + 1  # one GPU each
    if os.environ.get("SHOAL_BENCH_PODS"):  # per-pod create and bind times, for a profile
        Path(os.environ["SHOAL_BENCH_PODS"]).write_text(json.dumps(seen))
    done = len(times)
    span = (times[-1] - t0) if times else float("nan")
    return {
        "pods": n,
        "bound": done,
        "create_s": round(created_s, 1),
        "last_bind_s": round(span, 1),
        "pods_bound_per_s": round(done / span, 1) if times else 0.0,
        # Seconds from a pod's create to its bind: median and 99th percentile.
        "wait_p50_s": round(waits[len(waits) // 2], 2) if waits else None,
        "wait_p99_s": round(waits[int(len(waits) * 0.99)], 2) if waits else None,
        # Nodes holding more single-GPU pods than they have GPUs (must be 0).
        "overallocated_nodes": sum(1 for n in per_node.values() if n > gpus),
    }
