"""bench.api_load `--split`: the API and the scheduler as two processes on one store, as the
Helm chart runs them on PostgreSQL (docs/install.md, "API and scheduler apart").

Per configuration: `shoal serve --role scheduler --backend kubernetes` (the loop, probes on
its port) against a control plane on loopback (scripts/controlplane.sh: kube-apiserver and
kwok, started once per benchmark run, with a few kwok GPU nodes), then `shoal serve --role
api` (with `--api-workers N` on PostgreSQL) on the same database, tokens file and worker
key; the driver talks to the API process only. Split roles refuse `--backend local`, hence
the control plane. The benchmark's half-GPU jobs get a reservation pod per GPU; kwok cannot
run `shoal reserve`, so a thread here writes the GPU UUID onto each running one, as
bench.kube_scale does, and the worker pods follow. kwok runs no command: placed jobs stay
Running, so once the nodes are full the rest stay pending in the scheduler's cycles.
Between configurations the jobs namespace's pods are deleted, so each fresh store starts on
an empty cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.kubescale_cluster import JOBS_NS, Cluster
from bench.serving import free_port, serving

TOKEN = "bench-admin"
NODES, GPUS = 4, 8  # kwok nodes: room for 64 of the benchmark's half-GPU jobs


@dataclass
class Split:
    """The control plane the scheduler processes run against, and the API's worker count."""

    cluster: Cluster
    api_workers: int
    interval_s: float


@contextmanager
def control_plane(api_workers: int, interval_s: float) -> Iterator[Split]:
    """A fresh control plane with the jobs namespace and `NODES` kwok GPU nodes; stopped
    (scripts/controlplane.sh stop) afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="shoal-bench-cp-"))
    cluster = Cluster(peer=False, tmp=tmp)
    stop = threading.Event()
    player = threading.Thread(target=_play_reserver, args=(cluster, stop), daemon=True)
    try:
        cluster.namespace(JOBS_NS)
        # Reservation pods run as shoal-reserve (the chart makes it).
        sa = {"metadata": {"name": "shoal-reserve"}}
        cluster.post(f"/api/v1/namespaces/{JOBS_NS}/serviceaccounts", sa)
        cluster.nodes(NODES, GPUS)
        player.start()
        yield Split(cluster, api_workers, interval_s)
    finally:
        stop.set()
        if player.is_alive():
            player.join(timeout=10)
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _play_reserver(cluster: Cluster, stop: threading.Event) -> None:
    """What `shoal reserve` would write onto its running pod (its GPU's UUID)."""
    done: set[str] = set()
    pods = f"/api/v1/namespaces/{JOBS_NS}/pods"
    patch = {"Content-Type": "application/merge-patch+json"}
    while not stop.wait(0.5):
        try:
            items = cluster.http.get(pods).json().get("items", [])
        except Exception:  # the control plane going away at the end
            continue
        for pod in items:
            name = pod["metadata"]["name"]
            uid = pod["metadata"]["uid"]
            running = pod.get("status", {}).get("phase") == "Running"
            if not name.startswith("shoal-gpu-") or not running or uid in done:
                continue
            body = {"metadata": {"annotations": {"shoal.dev/gpu-uuid": f"GPU-{uid}"}}}
            r = cluster.http.patch(f"{pods}/{name}", content=json.dumps(body), headers=patch)
            if r.status_code < 300:
                done.add(uid)


def _empty_jobs_namespace(cluster: Cluster) -> None:
    """Delete the previous configuration's worker pods (its store is gone)."""
    pods = f"/api/v1/namespaces/{JOBS_NS}/pods"
    cluster.http.delete(pods, params={"gracePeriodSeconds": "0"})
    deadline = time.monotonic() + 60
    while cluster.http.get(pods).json().get("items") and time.monotonic() < deadline:
        time.sleep(0.5)


@contextmanager
def serve_split(
    db_url: str | None, extra_env: dict[str, str], split: Split
) -> Iterator[tuple[str, str, int, int]]:
    """A scheduler process and an API process on one store; yields (API url, admin token,
    API pid, scheduler pid). With `db_url` None both use a fresh SQLite file."""
    _empty_jobs_namespace(split.cluster)
    top = Path(tempfile.mkdtemp(prefix="shoal-bench-split-"))
    tokens = top / "tokens.yaml"
    tokens.write_text(f"{TOKEN}: {{user: admin, role: admin}}\n")
    url = db_url or f"sqlite:///{top / 'shoal.db'}"
    env = {
        **os.environ,
        **extra_env,
        "SHOAL_DATABASE_URL": url,
        "SHOAL_API_TOKENS_FILE": str(tokens),
        "SHOAL_WORKER_KEY": "a-worker-key-for-the-benchmark",
        "KUBECONFIG": str(split.cluster.kubeconfig),
        "SHOAL_JOBS_NAMESPACE": JOBS_NS,
        "SHOAL_LEADER_ELECTION": "false",
        "SHOAL_POD_NAME": "bench-scheduler",
    }
    for name in ("SHOAL_ROLE", "SHOAL_API_WORKERS", "SHOAL_BACKEND", "SHOAL_KUBE_API_URL",
                 "SHOAL_API_TOKENS", "SHOAL_POLICY_FILE"):  # fmt: skip
        env.pop(name, None)

    # The database URL travels as SHOAL_DATABASE_URL: any local user reads arguments.
    def cmd(role: str, port: int, *extra: str) -> list[str]:
        state = top / role
        state.mkdir()
        return [sys.executable, "-m", "scheduler.cli.main", "serve", "--role", role,
                "--backend", "kubernetes", "--port", str(port), "--state-dir", str(state),
                *extra]  # fmt: skip

    workers = ["--api-workers", str(split.api_workers)] if db_url else []
    try:
        with ExitStack() as stack:
            # The scheduler first: it creates the schema and stores the inventory.
            port = free_port()
            sched_cmd = cmd("scheduler", port, "--interval", str(split.interval_s))
            _, sched = stack.enter_context(serving(sched_cmd, env, top / "scheduler", port))
            port = free_port()
            api_url, api = stack.enter_context(
                serving(cmd("api", port, *workers), env, top / "api", port)
            )
            yield api_url, TOKEN, api.pid, sched.pid
    finally:
        shutil.rmtree(top, ignore_errors=True)


def worker_pods(split: Split) -> int:
    """Running worker pods in the jobs namespace: that the scheduler process placed and
    launched submissions."""
    items = split.cluster.http.get(f"/api/v1/namespaces/{JOBS_NS}/pods").json()["items"]
    return sum(
        1
        for p in items
        if not p["metadata"]["name"].startswith("shoal-gpu-")
        and p.get("status", {}).get("phase") == "Running"
    )


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and its live descendants (the API's uvicorn
    worker processes)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total
