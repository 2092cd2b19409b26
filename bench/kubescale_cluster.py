"""kube_scale's control plane: a fresh one per scheduler (scripts/controlplane.sh), its kwok
GPU nodes, and a watch of when each pod in a namespace was first seen bound."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

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
POOL = {"key": "shoal.dev/pool", "value": "shoal"}  # Shoal's node pool (its DRA nodes)


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

    def nodes(self, n: int, gpus: int, device_plugin: bool = True, pool: bool = False) -> float:
        """`n` kwok nodes `kw-0000`...; with `device_plugin`, `gpus` GPUs each as
        `nvidia.com/gpu` and GFD labels; without, neither (a DRA driver's slices say).
        `pool`: in Shoal's node pool (label and taint `shoal.dev/pool=shoal`), where
        Shoal allocates DRA devices itself (docs/kubernetes.md)."""
        t0 = time.monotonic()

        def make(i: int) -> None:
            product, mem = MODELS[i % len(MODELS)]
            alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
            gfd = {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(mem),
                "nvidia.com/gpu.count": str(gpus),
            }
            if not device_plugin:
                alloc.pop("nvidia.com/gpu")
                gfd = {}
            self.post(
                "/api/v1/nodes",
                {
                    "metadata": {
                        "name": f"kw-{i:04d}",
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": f"kw-{i:04d}",
                            **gfd,
                            **({POOL["key"]: POOL["value"]} if pool else {}),
                        },
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "spec": {"taints": [{**POOL, "effect": "NoSchedule"}] if pool else []},
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
