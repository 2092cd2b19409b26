"""kube_scale `--dra` (issue 28 item 5): DRA claims (resource.k8s.io/v1) on the same kwok
nodes, kube-scheduler's allocation against Shoal's, each on a fresh control plane.

The bench plays NVIDIA's DRA driver: a DeviceClass `gpu.nvidia.com` and, for each kwok
node, its ResourceSlice of `--gpus` whole GPUs (`tests/support/draslices.py`, the shapes
the cluster tests use); the nodes have no `nvidia.com/gpu` and no GFD labels.

(a) kube-scheduler: `--pods` plain pods (default scheduler) made from `--creators`
    processes, each with `resourceClaims: [{name: gpu, resourceClaimTemplateName: gpu1}]`
    and a ResourceClaimTemplate asking one device of class gpu.nvidia.com; the
    resourceclaim controller makes each pod's claim, kube-scheduler allocates and binds.
(b) Shoal: `--pods` jobs of one worker x 1 GPU submitted to its REST API from
    `--creators` x 8 threads; Shoal makes each worker's claim, allocates it and binds.
Measured as kube_scale's (a): pods bound per second from the first create (submit) to the
last bind seen on a watch, and each pod's create (submit answered) to bind. Then the
claims are checked: no device in two claims, every bound pod's claim allocated, reserved
for that pod (its uid) and on its node.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.kubescale_cluster import JOBS_NS, NS, BindWatch, Cluster
from bench.kubescale_pods import single_gpu_pods
from bench.kubescale_shoal import ShoalProc, step_means
from tests.support.draslices import gpu_class, gpu_slice

Obj = dict[str, Any]
DRA = "/apis/resource.k8s.io/v1"
CLASS = "gpu.nvidia.com"
TEMPLATE = "gpu1"


def publish(cluster: Cluster, nodes: int, gpus: int) -> float:
    """The DeviceClass and every node's ResourceSlice; seconds taken."""
    t0 = time.monotonic()
    cluster.post(f"{DRA}/deviceclasses", gpu_class(CLASS))
    slices = [s for i in range(nodes) for s in gpu_slice(f"kw-{i:04d}", gpus=gpus)]
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda s: cluster.post(f"{DRA}/resourceslices", s), slices))
    return time.monotonic() - t0


def kube_scheduler(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = Cluster(peer=True, tmp=tmp / "dra-peer")
    try:
        out: dict[str, Any] = {
            "nodes_ready_s": round(cluster.nodes(args.nodes, args.gpus, False), 1)
        }
        out["publish_s"] = round(publish(cluster, args.nodes, args.gpus), 1)
        cluster.namespace(NS)
        exactly = {"deviceClassName": CLASS, "count": 1}
        template = {
            "metadata": {"name": TEMPLATE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
        }
        cluster.post(f"{DRA}/namespaces/{NS}/resourceclaimtemplates", template)
        time.sleep(2)  # its informers have the slices
        out |= single_gpu_pods(
            cluster, args.pods, "default-scheduler", args.timeout, args.gpus, args.creators,
            claim_template=TEMPLATE,
        )  # fmt: skip
        out["check"] = check_claims(cluster, NS)
        return out
    finally:
        cluster.stop()


def shoal(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = Cluster(peer=False, tmp=tmp / "dra-shoal")
    proc: ShoalProc | None = None
    try:
        # In Shoal's node pool: elsewhere Shoal leaves DRA devices to kube-scheduler.
        out: dict[str, Any] = {
            "nodes_ready_s": round(cluster.nodes(args.nodes, args.gpus, False, pool=True), 1)
        }
        out["publish_s"] = round(publish(cluster, args.nodes, args.gpus), 1)
        cluster.namespace(JOBS_NS)
        proc = ShoalProc(cluster, tmp / "dra-shoal", args.profile)
        total = args.nodes * args.gpus
        proc.queue("bench", total)
        t0 = time.monotonic()
        while _gpus_seen(proc) < total:  # its caches have every slice
            if time.monotonic() - t0 > 300:
                raise RuntimeError(f"Shoal sees {_gpus_seen(proc)} of {total} DRA GPUs")
            time.sleep(0.5)
        out["gpus_seen_s"] = round(time.monotonic() - t0, 1)
        before = proc.steps()
        out |= one_gpu_jobs(cluster, proc, args.pods, args.timeout, args.creators * 8)
        out["cycle"] = step_means(before, proc.steps())
        out["check"] = check_claims(cluster, JOBS_NS)
        out["usage"] = proc.usage()
        return out
    finally:
        if proc:
            proc.stop()
            if args.profile is not None:  # its log beside the profile
                shutil.copy(tmp / "dra-shoal" / "shoal.log", f"{args.profile}.log")
        cluster.stop()


def _gpus_seen(proc: ShoalProc) -> float:
    r = proc.api.get("/cluster/summary")
    return float(r.json()["gpus"]["total"]) if r.status_code == 200 else 0.0


def one_gpu_jobs(
    cluster: Cluster, proc: ShoalProc, n: int, timeout: float, threads: int
) -> dict[str, Any]:
    """Submit `n` jobs of one 1-GPU worker from `threads` threads; time their binds."""
    watch = BindWatch(cluster, JOBS_NS)
    time.sleep(1)
    submitted: dict[str, float] = {}  # job id -> when its submit was answered
    retries = Counter[str]()
    todo = iter(range(n))

    def submit() -> None:
        with httpx.Client(base_url=proc.api.base_url, headers=proc.api.headers, timeout=60) as c:
            for i in todo:  # the iterator is shared: next() on it holds the GIL
                body = {
                    "name": f"d{i}", "queue": "bench", "framework": "generic",
                    "image": "img:1", "command": ["sleep", "1d"], "workers": 1, "gpu": 1,
                    "cpu": "100m", "memory": "128Mi",
                }  # fmt: skip
                for _ in range(100):
                    r = c.post("/jobs", json=body)
                    if r.status_code not in (429, 503):
                        break
                    retries[str(r.status_code)] += 1
                    time.sleep(min(float(r.headers.get("Retry-After", "1")), 1.0))
                if r.status_code >= 300:
                    raise RuntimeError(f"submit: {r.status_code} {r.text[:300]}")
                submitted[r.json()["id"]] = time.monotonic()

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(submit) for _ in range(threads)]:
            f.result()
    submit_s = max(submitted.values()) - t0
    deadline = time.monotonic() + timeout
    while len(_bound(watch, submitted)) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    watch.stop.set()
    bound = _bound(watch, submitted)
    times = sorted(t for _, t in bound.values())
    waits = sorted(t - submitted[job] for job, t in bound.values())
    span = times[-1] - t0 if times else float("nan")
    return {
        "pods": n,
        "bound": len(times),
        "create_s": round(submit_s, 1),
        "submit_retries": dict(retries),
        "last_bind_s": round(span, 1),
        "pods_bound_per_s": round(len(times) / span, 1) if times else 0.0,
        "wait_p50_s": round(waits[len(waits) // 2], 2) if waits else None,
        "wait_p99_s": round(waits[int(len(waits) * 0.99)], 2) if waits else None,
    }


def _bound(watch: BindWatch, jobs: dict[str, float]) -> dict[str, tuple[str, float]]:
    """pod name -> (its job, when it was first seen bound), for the jobs' workers."""
    with watch.lock:
        out = {}
        for name, t in watch.bound.items():
            pod = watch.pods.get(name)
            job = ((pod or {}).get("metadata", {}).get("annotations") or {}).get("shoal.dev/job-id")
            if job in jobs:
                out[name] = (job, t)
        return out


def check_claims(cluster: Cluster, ns: str) -> dict[str, Any]:
    """Every bound pod's claim: allocated, reserved for the pod, its device on the pod's
    node; and no device allocated to two claims."""
    pods = _list(cluster, f"/api/v1/namespaces/{ns}/pods")
    claims = {
        c["metadata"]["name"]: c for c in _list(cluster, f"{DRA}/namespaces/{ns}/resourceclaims")
    }
    node_of = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): s["spec"].get("nodeName")
        for s in _list(cluster, f"{DRA}/resourceslices")
        for d in s["spec"].get("devices") or []
    }
    holders = Counter[tuple[str, str, str]]()
    for c in claims.values():
        for key in _devices(c):
            holders[key] += 1
    bad: Counter[str] = Counter()
    bound = 0
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node:
            continue
        bound += 1
        made = {
            s["name"]: s.get("resourceClaimName")
            for s in (p.get("status") or {}).get("resourceClaimStatuses") or []
        }
        refs = [
            c.get("resourceClaimName") or made.get(c["name"])
            for c in p["spec"].get("resourceClaims") or []
        ]
        claim = claims.get(refs[0] or "") if refs else None
        if claim is None or not _devices(claim):
            bad["bound_without_allocated_claim"] += 1
            continue
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if not any(r.get("uid") == p["metadata"]["uid"] for r in reserved):
            bad["claim_not_reserved_for_pod"] += 1
        if any(node_of.get(k) != node for k in _devices(claim)):
            bad["device_not_on_pod_node"] += 1
    checks = (
        "bound_without_allocated_claim",
        "claim_not_reserved_for_pod",
        "device_not_on_pod_node",
    )
    return {
        "bound_pods": bound,
        "allocated_claims": sum(1 for c in claims.values() if _devices(c)),
        "devices_in_two_claims": sum(1 for n in holders.values() if n > 1),
        **{k: bad[k] for k in checks},
    }


def _devices(claim: Obj) -> list[tuple[str, str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def _list(cluster: Cluster, path: str) -> list[Obj]:
    items: list[Obj] = []
    token = ""
    while True:
        r = cluster.http.get(path, params={"limit": 500, **({"continue": token} if token else {})})
        r.raise_for_status()
        body = r.json()
        items += body["items"]
        token = body["metadata"].get("continue") or ""
        if not token:
            return items


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Both, kube-scheduler first, and Shoal's pods/s over kube-scheduler's."""
    out: dict[str, Any] = {}
    if not args.shoal_only:
        out["kube-scheduler"] = kube_scheduler(args, tmp)
    if not args.peer_only:
        out["shoal"] = shoal(args, tmp)
    peer = out.get("kube-scheduler", {}).get("pods_bound_per_s")
    mine = out.get("shoal", {}).get("pods_bound_per_s")
    out["ratio"] = round(mine / peer, 2) if peer and mine else None
    return out
