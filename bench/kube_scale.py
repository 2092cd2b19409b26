"""Scale on a real control plane: Shoal against kube-scheduler, side by side (not a test).

    .venv/bin/python bench/kube_scale.py [--nodes 1000] [--gpus 8] [--pods 5000]
        [--gangs 300] [--gang-size 8] [--fractions 2000] [--timeout 900] [--json out.json]

Each scheduler gets a fresh control plane (scripts/controlplane.sh start: etcd,
kube-apiserver, kube-controller-manager, kwok; plus kube-scheduler, default profile, for
the peer) with `--nodes` kwok nodes of `--gpus` GPUs (four GPU models by GFD labels).

(a) `--pods` single-GPU pods (`nvidia.com/gpu: 1`), created from `--creators`
    processes (4) of 8 threads each, so that creating them does not set the rate; for
    Shoal with `schedulerName: shoal` and the `shoal.dev/queue` label (Shoal adopts and
    binds them, its foreign-pod path), for the peer with the default scheduler.
    Measured: pods bound per second from the first create to the last bind, as seen on a
    watch of the namespace.
(b) `--gangs` TrainingJob-like REST jobs of `--gang-size` workers x 1 GPU (Shoal only:
    kube-scheduler has no gangs); at the end every gang is fully bound or not at all.
(c) `--fractions` REST jobs of one 0.5-GPU worker (Shoal only: kube-scheduler has no
    fractions). kwok cannot run `shoal reserve`, so this script plays it: it writes a
    made-up UUID onto each reservation pod, as the reserver would.
Shoal runs as `shoal serve --backend kubernetes` on this host with the admin kubeconfig;
its peak RSS (VmHWM) and CPU seconds (utime+stime) are read from /proc at the end.
Its cycle's step times (issue 10, item 14) come from its /metrics histograms: the mean
per step over the cycles of (a), and over an idle stretch after (a) with every pod of
(a) bound (`cycle_a`, `cycle_idle`). `--profile PATH` runs Shoal's loop under cProfile
(only `Loop.run_once`, summed over all cycles; written as pstats to PATH at exit) and
writes each cycle's step times to PATH.cycles.json.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import json
import multiprocessing
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "scripts" / "controlplane.sh"
MODELS = [
    ("NVIDIA-A100-SXM4-80GB", 81920),
    ("NVIDIA-H100-80GB-HBM3", 81920),
    ("NVIDIA-L40S", 46068),
    ("Tesla-V100-SXM2-32GB", 32768),
]
NS = "bench"
JOBS_NS = "shoal-jobs"


class Cluster:
    """A fresh control plane and a raw HTTP client on it (client certificate)."""

    def __init__(self, peer: bool, tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmp)}
        if peer:
            env["SHOAL_CONTROLPLANE_SCHEDULER"] = "1"
        out = subprocess.run(
            [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            raise SystemExit(f"controlplane.sh start failed:\n{out.stderr}")
        exports = dict(
            line[len("export ") :].split("=", 1)
            for line in out.stdout.splitlines()
            if line.startswith("export ")
        )
        self.env = env
        self.dir = Path(exports["SHOAL_CONTROLPLANE_DIR"])
        self.kubeconfig = self.dir / "admin.kubeconfig"
        kc = yaml.safe_load(self.kubeconfig.read_text())
        self.server = kc["clusters"][0]["cluster"]["server"]
        ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        ctx.load_cert_chain(str(self.dir / "admin.crt"), str(self.dir / "admin.key"))
        self.ssl = ctx
        self.http = httpx.Client(base_url=self.server, verify=ctx, timeout=60)
        kubectl = ROOT / ".tools" / "bin" / "kubectl"
        subprocess.run(  # Shoal's CR watcher expects its CRDs
            [str(kubectl if kubectl.exists() else "kubectl"), "--kubeconfig", str(self.kubeconfig),
             "apply", "-f", str(ROOT / "deploy" / "crds")],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def stop(self) -> None:
        self.http.close()
        subprocess.run(
            [str(SCRIPT), "stop"],
            env={**self.env, "SHOAL_CONTROLPLANE_DIR": str(self.dir)},
            capture_output=True,
            timeout=120,
        )

    def post(self, path: str, body: dict[str, Any], client: httpx.Client | None = None) -> None:
        for attempt in range(20):
            r = (client or self.http).post(path, json=body)
            if r.status_code < 300 or r.status_code == 409:
                return
            if r.status_code in (429, 500, 503, 504):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:300]}")
        raise RuntimeError(f"POST {path}: gave up")

    def namespace(self, name: str) -> None:
        self.post("/api/v1/namespaces", {"metadata": {"name": name}})
        # Pods need the namespace's default ServiceAccount (the controller makes it).
        sa = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        while self.http.get(sa).status_code != 200:
            time.sleep(0.2)

    def nodes(self, n: int, gpus: int) -> float:
        t0 = time.monotonic()

        def make(i: int) -> None:
            product, mem = MODELS[i % len(MODELS)]
            alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
            self.post(
                "/api/v1/nodes",
                {
                    "metadata": {
                        "name": f"kw-{i:04d}",
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": f"kw-{i:04d}",
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": product,
                            "nvidia.com/gpu.memory": str(mem),
                            "nvidia.com/gpu.count": str(gpus),
                        },
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "status": {"allocatable": alloc, "capacity": alloc},
                },
            )

        with ThreadPoolExecutor(16) as ex:
            list(ex.map(make, range(n)))

        def ready() -> int:
            items = self.http.get("/api/v1/nodes").json()["items"]
            return sum(
                1
                for nd in items
                if not any(t["key"].startswith("node.kubernetes.io/")
                           for t in nd["spec"].get("taints") or [])
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in nd.get("status", {}).get("conditions") or [])
            )  # fmt: skip

        while ready() < n:
            time.sleep(1)
        return time.monotonic() - t0


class BindWatch:
    """Watches pods in a namespace; records when each was first seen bound."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.bound: dict[str, float] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.cluster, self.ns = cluster, ns
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        c = httpx.Client(base_url=self.cluster.server, verify=self.cluster.ssl, timeout=None)
        rv = self._relist(c)
        while not self.stop.is_set():
            url = f"/api/v1/namespaces/{self.ns}/pods?watch=1&resourceVersion={rv}"
            try:
                got = self._stream(c, url + "&timeoutSeconds=60&allowWatchBookmarks=true", rv)
            except httpx.HTTPError:
                got = rv  # the server ended the stream: resume from the last event seen
                time.sleep(0.2)
            rv = got if got is not None else self._relist(c)  # 410 Expired: list again

    def _relist(self, c: httpx.Client) -> str:
        r = c.get(f"/api/v1/namespaces/{self.ns}/pods")
        body = r.json()
        now = time.monotonic()
        with self.lock:
            for obj in body.get("items", []):
                name = obj["metadata"]["name"]
                self.pods[name] = obj
                if obj["spec"].get("nodeName") and name not in self.bound:
                    self.bound[name] = now
        return str(body["metadata"]["resourceVersion"])

    def _stream(self, c: httpx.Client, url: str, rv: str) -> str | None:
        with c.stream("GET", url) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    return None
                rv = obj["metadata"]["resourceVersion"]
                if ev["type"] == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                with self.lock:
                    if ev["type"] == "DELETED":
                        self.pods.pop(name, None)
                        continue
                    self.pods[name] = obj
                    if obj["spec"].get("nodeName") and name not in self.bound:
                        self.bound[name] = time.monotonic()
                if self.stop.is_set():
                    break
        return rv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profiled_serve() -> None:
    """`shoal serve` (argv as given) with `Loop.run_once` profiled: the child of
    `--profile`. cProfile follows one thread; the loop's cycles run on one thread."""
    from scheduler.cli.main import main as shoal_main

    out = os.environ["SHOAL_BENCH_PROFILE"]
    prof = cProfile.Profile()
    cycles = _profile_cycles(prof)
    marks = _mark_foreign_pods()
    saves = _record_saves()

    def dump() -> None:
        Path(out + ".saves.json").write_text(json.dumps(saves))
        prof.dump_stats(out)
        Path(out + ".cycles.json").write_text(json.dumps(cycles))
        Path(out + ".pods.json").write_text(json.dumps(marks))

    atexit.register(dump)
    sys.argv = ["shoal", *sys.argv[1:]]
    shoal_main()


def _profile_cycles(prof: cProfile.Profile) -> list[dict[str, Any]]:
    """Profile every `Loop.run_once`; the list fills with each cycle's step times."""
    from scheduler.loop.service import Loop

    cycles: list[dict[str, Any]] = []
    inner = Loop.run_once

    def run_once(self: Loop) -> Any:
        prof.enable()
        try:
            report = inner(self)
        finally:
            prof.disable()
        if report is not None:
            placed = len(report.result.places)
            cycles.append({"t": round(time.monotonic(), 3),
                           "seconds": round(report.seconds, 4), "placed": placed,
                           **{k: round(v, 4) for k, v in report.steps.items()}})  # fmt: skip
        return report

    Loop.run_once = run_once  # type: ignore[method-assign]
    return cycles


def _mark_foreign_pods() -> dict[str, dict[str, float]]:
    """When each foreign pod was first seen waiting, placed (bind_foreign) and bound."""
    from scheduler.backends.kubernetes.backend import KubernetesBackend
    from scheduler.backends.kubernetes.foreign import ForeignBindings
    from scheduler.backends.kubernetes.podindex import PodIndex

    marks: dict[str, dict[str, float]] = {}
    update, bind_foreign = PodIndex.update, KubernetesBackend.bind_foreign
    bind = ForeignBindings.bind  # both the pool's bindings and the backend's go through it

    def mark(key: str, what: str) -> None:
        marks.setdefault(key, {}).setdefault(what, time.monotonic())

    def on_update(self: PodIndex, key: str, obj: Any) -> None:
        update(self, key, obj)
        if self.pending(key) is not None:
            mark(key, "seen")

    def on_bind_foreign(self: KubernetesBackend, job_id: str, placement: Any) -> None:
        mark(job_id.removeprefix("pod:"), "placed")
        bind_foreign(self, job_id, placement)

    def on_bind(self: ForeignBindings, pod: Any, placement: Any) -> bool:
        mark(f"{pod.namespace}/{pod.name}", "start")
        done = bind(self, pod, placement)
        mark(f"{pod.namespace}/{pod.name}", "bound")
        return done

    PodIndex.update = on_update  # type: ignore[method-assign]
    KubernetesBackend.bind_foreign = on_bind_foreign  # type: ignore[method-assign]
    ForeignBindings.bind = on_bind  # type: ignore[method-assign]
    return marks


def _record_saves() -> list[dict[str, Any]]:
    """Each inventory write: when, how long, and a few of the nodes that changed."""
    from scheduler.store import cycle as store

    saves: list[dict[str, Any]] = []
    save = store.save_inventory
    last: dict[str, Any] = {}

    def on_save(**kw: Any) -> None:
        t = time.monotonic()
        save(**kw)
        now = {n.name: n for n in kw["nodes"]}
        diff = [repr((last.get(k), n)) for k, n in now.items() if last.get(k) != n]
        saves.append({"t": round(t, 3), "s": round(time.monotonic() - t, 3),
                      "changed": len(diff), "some": diff[:2]})  # fmt: skip
        last.clear()
        last.update(now)

    store.save_inventory = on_save
    return saves


def step_seconds(metrics_text: str) -> dict[str, tuple[float, float]]:
    """step (and "cycle") -> (sum of seconds, count) from Shoal's /metrics."""
    out: dict[str, tuple[float, float]] = {}
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name not in (
            "shoal_scheduling_step_duration_seconds",
            "shoal_scheduling_cycle_duration_seconds",
        ):
            continue
        for sample in fam.samples:
            if sample.name.endswith(("_sum", "_count")):
                key = sample.labels.get("step", "cycle")
                total, count = out.get(key, (0.0, 0.0))
                if sample.name.endswith("_sum"):
                    total = sample.value
                else:
                    count = sample.value
                out[key] = (total, count)
    return out


def step_means(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """Mean seconds per cycle of each step between two scrapes, plus `cycles`."""
    out: dict[str, float] = {}
    for key, (total, count) in after.items():
        t0, c0 = before.get(key, (0.0, 0.0))
        if count > c0:
            out[key] = round((total - t0) / (count - c0), 4)
    cycles = after.get("cycle", (0.0, 0.0))[1] - before.get("cycle", (0.0, 0.0))[1]
    out["cycles"] = cycles
    return out


class ShoalProc:
    def __init__(self, cluster: Cluster, tmp: Path, profile: Path | None = None) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "SHOAL_BACKEND": "kubernetes",
            "SHOAL_STATE_DIR": str(tmp / "shoal"),
            "SHOAL_JOBS_NAMESPACE": JOBS_NS,
            "SHOAL_POD_NAME": "bench",
            "PYTHONPATH": str(ROOT),
        }
        for k in ("SHOAL_KUBE_API_URL", "SHOAL_DATABASE_URL", "SHOAL_API_TOKENS_FILE"):
            env.pop(k, None)
        self.log = open(tmp / "shoal.log", "w")  # noqa: SIM115 (closed in stop)
        run = [sys.executable, "-m", "scheduler.cli.main"]
        if profile is not None:
            env["SHOAL_BENCH_PROFILE"] = str(profile.resolve())
            run = [sys.executable, "-c", "from bench.kube_scale import profiled_serve as p; p()"]
        self.proc = subprocess.Popen(
            [*run, "serve", "--port", str(port),
             "--min-runtime", "0", "--interval", "0.2", "--policy", "binpack"],
            env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        token_file = tmp / "shoal" / "admin-token"
        for _ in range(600):
            if self.proc.poll() is not None:
                raise SystemExit(f"shoal serve exited:\n{(tmp / 'shoal.log').read_text()}")
            try:
                if token_file.exists() and httpx.get(f"{self.url}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        token = token_file.read_text().strip()
        self.api = httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def steps(self) -> dict[str, tuple[float, float]]:
        return step_seconds(self.api.get(f"{self.url}/metrics").text)

    def usage(self) -> dict[str, float]:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return {"peak_rss_mib": hwm / 1024, "cpu_s": (int(fields[11]) + int(fields[12])) / tick}

    def stop(self) -> None:
        self.api.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def pod_body(i: int, scheduler: str) -> bytes:
    return json.dumps({
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
    }).encode()  # fmt: skip


def create_pods(
    server: str, certs: str, scheduler: str, indices: list[int], threads: int
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
                body = pod_body(i, scheduler)
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
    cluster: Cluster, n: int, scheduler: str, timeout: float, gpus: int, creators: int = 4
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
                      list(range(k, n, creators)), 8)
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


def run_shoal(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Shoal on a fresh control plane: (a), then (b) and (c)."""
    cluster = Cluster(peer=False, tmp=tmp / "shoal")
    shoal: ShoalProc | None = None
    try:
        out: dict[str, Any] = {"nodes_ready_s": round(cluster.nodes(args.nodes, args.gpus), 1)}
        (tmp / "shoal").mkdir(exist_ok=True)
        cluster.namespace(JOBS_NS)
        # Reservation pods run as shoal-reserve (the chart makes it; admission refuses
        # pods whose ServiceAccount does not exist).
        cluster.post(
            f"/api/v1/namespaces/{JOBS_NS}/serviceaccounts",
            {"metadata": {"name": "shoal-reserve"}},
        )
        shoal = ShoalProc(cluster, tmp / "shoal", args.profile)
        total = args.nodes * args.gpus
        for _ in range(60):  # 503 while the first cycle writes a large inventory
            r = shoal.api.post("/queues", json={"name": "bench", "guaranteed": {"total": total}})
            if r.status_code != 503:
                break
            time.sleep(1)
        assert r.status_code < 300, r.text
        before = shoal.steps()
        out["a"] = single_gpu_pods(
            cluster, args.pods, "shoal", args.timeout, args.gpus, args.creators
        )
        after = shoal.steps()
        out["cycle_a"] = step_means(before, after)
        time.sleep(10)  # idle cycles with every pod of (a) in the cache
        out["cycle_idle"] = step_means(after, shoal.steps())
        print(json.dumps(out, indent=1), flush=True)
        # Free the GPUs for (b) and (c): delete (a)'s pods at once (grace 0; a graceful
        # delete waits for kwok to finish each of 5,000 pods, ~2/s on a loaded machine).
        # One collection delete; the server goes on after a 504 on a slow answer.
        cluster.http.request(
            "DELETE",
            f"/api/v1/namespaces/{NS}/pods",
            json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            timeout=300,
        )
        cluster.http.delete(f"/api/v1/namespaces/{NS}")
        while cluster.http.get(f"/api/v1/namespaces/{NS}").status_code != 404:
            time.sleep(1)
        if args.gangs:
            out["b"] = rest_jobs(cluster, shoal, args.gangs, args.gang_size, 1, args.timeout)
            print(json.dumps(out["b"], indent=1), flush=True)
        if args.fractions:
            out["c"] = rest_jobs(cluster, shoal, args.fractions, 1, 0.5, args.timeout)
        out["usage"] = shoal.usage()
        return out
    finally:
        if shoal:
            shoal.stop()
            if args.profile is not None:  # its log beside the profile
                shutil.copy(tmp / "shoal" / "shoal.log", f"{args.profile}.log")
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--gangs", type=int, default=300)
    ap.add_argument("--gang-size", type=int, default=8)
    ap.add_argument("--fractions", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="pstats of Shoal's Loop.run_once to this file")
    ap.add_argument("--shoal-only", action="store_true", help="skip the kube-scheduler peer")
    ap.add_argument("--peer-only", action="store_true", help="only the kube-scheduler peer")
    ap.add_argument("--creators", type=int, default=4, help="pod-creating processes (x8 threads)")
    args = ap.parse_args()
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        # The peer: kube-scheduler, default profile.
        if not args.shoal_only:
            peer = Cluster(peer=True, tmp=tmp / "peer")
            try:
                results["nodes_ready_s_peer"] = round(peer.nodes(args.nodes, args.gpus), 1)
                results["kube-scheduler"] = {
                    "a": single_gpu_pods(
                        peer,
                        args.pods,
                        "default-scheduler",
                        args.timeout,
                        args.gpus,
                        args.creators,
                    )
                }
            finally:
                peer.stop()
            print(json.dumps(results, indent=1), flush=True)

        if not args.peer_only:
            results["shoal"] = run_shoal(args, tmp)
    print(json.dumps(results, indent=1), flush=True)
    a_peer = results.get("kube-scheduler", {}).get("a", {}).get("pods_bound_per_s")
    a_shoal = results.get("shoal", {}).get("a", {}).get("pods_bound_per_s")
    results["ratio_a"] = round(a_shoal / a_peer, 2) if a_peer and a_shoal else None
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
