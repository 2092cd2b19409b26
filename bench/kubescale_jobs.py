"""kube_scale (b) and (c): gangs and fractional jobs through Shoal's REST API (Shoal only),
with this script playing `shoal reserve`, which kwok cannot run."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from bench.kubescale_cluster import JOBS_NS, BindWatch, Cluster
from bench.kubescale_shoal import ShoalProc


def rest_jobs(
    cluster: Cluster, shoal: ShoalProc, count: int, workers: int, gpu: float, timeout: float
) -> dict[str, Any]:
    watch = BindWatch(cluster, JOBS_NS)
    stop_play = threading.Event()
    player = threading.Thread(target=_play_reserver, args=(cluster, watch, stop_play), daemon=True)
    player.start()
    t0 = time.monotonic()
    wanted = set(_submit_jobs(shoal, count, workers, gpu))
    submit_s = time.monotonic() - t0
    want = count * workers
    deadline = time.monotonic() + timeout
    while _bound_workers(_worker_pods(watch, wanted)) < want and time.monotonic() < deadline:
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    stop_play.set()
    watch.stop.set()
    by_job = _worker_pods(watch, wanted)
    partial = sum(
        1 for ps in by_job.values() if 0 < sum(1 for p in ps if p["spec"].get("nodeName")) < workers
    )
    got = _bound_workers(_worker_pods(watch, wanted))
    return {
        "jobs": count,
        "workers_per_job": workers,
        "gpu_per_worker": gpu,
        "workers_bound": got,
        "partial_gangs": partial,
        "submit_s": round(submit_s, 1),
        "last_bind_s": round(elapsed, 1),
        "pods_bound_per_s": round(got / elapsed, 1),
    }


def _play_reserver(cluster: Cluster, watch: BindWatch, stop_play: threading.Event) -> None:
    """What `shoal reserve` would write (its GPU's UUID): kwok cannot run it."""
    done: set[str] = set()
    while not stop_play.is_set():
        with watch.lock:
            todo = [
                n for n, p in watch.pods.items()
                if n.startswith("shoal-gpu-") and n not in done
                and p.get("status", {}).get("phase") == "Running"
            ]  # fmt: skip
        for name in todo:
            r = cluster.http.patch(
                f"/api/v1/namespaces/{JOBS_NS}/pods/{name}",
                content=json.dumps({"metadata": {"annotations": {
                    "shoal.dev/gpu-uuid": f"GPU-{abs(hash(name)):032x}"[:40]}}}),
                headers={"Content-Type": "application/merge-patch+json"},
            )  # fmt: skip
            if r.status_code < 300:
                done.add(name)
        stop_play.wait(0.5)


def _submit_jobs(shoal: ShoalProc, count: int, workers: int, gpu: float) -> list[str]:
    """Submit `count` jobs through the REST API; their ids."""
    ids: list[str] = []
    for i in range(count):
        body = {
            "name": f"{'g' if workers > 1 else 'f'}{i}",
            "queue": "bench",
            "framework": "pytorch" if workers > 1 else "generic",
            "image": "img:1",
            "command": ["sleep", "1d"],
            "workers": workers,
            "gpu": gpu,
            "cpu": "100m",
            "memory": "128Mi",
        }
        r = shoal.api.post("/jobs", json=body)
        if r.status_code >= 300:
            raise RuntimeError(f"submit: {r.status_code} {r.text[:300]}")
        ids.append(r.json()["id"])
    return ids


def _worker_pods(watch: BindWatch, wanted: set[str]) -> dict[str, list[dict[str, Any]]]:
    """job id -> its worker pods (not reservation pods), as the watch last saw them."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    with watch.lock:
        for p in watch.pods.values():
            ann = p["metadata"].get("annotations") or {}
            job = ann.get("shoal.dev/job-id")
            if job in wanted and not p["metadata"]["name"].startswith("shoal-gpu-"):
                by_job.setdefault(job, []).append(p)
    return by_job


def _bound_workers(by_job: dict[str, list[dict[str, Any]]]) -> int:
    return sum(1 for ps in by_job.values() for p in ps if p["spec"].get("nodeName"))
