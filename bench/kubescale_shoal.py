"""kube_scale's Shoal: `shoal serve --backend kubernetes` as a child process on the control
plane, its REST client, its cycle step times from /metrics and its RSS and CPU from /proc."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.kubescale_cluster import JOBS_NS, ROOT, Cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
            child = "from bench.kubescale_profile import profiled_serve as p; p()"
            run = [sys.executable, "-c", child]
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

    def queue(self, name: str, gpus: int) -> None:
        """A queue guaranteed `gpus` GPUs (503 while the first cycle writes a large
        inventory: retried)."""
        for _ in range(60):
            r = self.api.post("/queues", json={"name": name, "guaranteed": {"total": gpus}})
            if r.status_code != 503:
                break
            time.sleep(1)
        assert r.status_code < 300, r.text

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
