"""The GPU tier: `shoal serve --gpus auto` on this host's real GPUs (scripts/gpu-tier.sh).

Every test here is marked `gpu` and is skipped, saying why, where no GPU is visible
(NVML missing, no driver, no device): CI has none and never fails for it. With one,
`gpu_server` is one `shoal serve --gpus auto` for the module (SQLite, the local backend
on this host's GPUs, an MPS daemon where one can run) with a queue `gpu` whose guarantee
covers every GPU, and `Tier` holds the HTTP client and the host's GPUs as nvidia-smi
lists them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import serve
from support.wait import eventually


def _why_no_gpu() -> str | None:
    try:
        import pynvml
    except ImportError:
        return "no GPU visible: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return f"no GPU visible: NVML did not start ({e})"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "no GPU visible: NVML lists none"
    finally:
        pynvml.nvmlShutdown()
    if shutil.which("nvidia-smi") is None:
        return "no GPU visible: nvidia-smi is not on PATH"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [i for i in items if here in i.path.parents]
    why = _why_no_gpu() if mine else None
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))


@dataclass(frozen=True)
class SmiGpu:
    index: int
    uuid: str
    name: str
    memory_mib: int


def nvidia_smi() -> list[SmiGpu]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]
    return [SmiGpu(int(i), u, n, int(m)) for i, u, n, m in rows]


@dataclass
class Tier:
    http: httpx.Client
    state: Path
    gpus: list[SmiGpu]

    def submit(self, **spec: Any) -> str:
        body = {"queue": "gpu", "image": "local", "backoffLimit": 0, **spec}
        resp = self.http.post("/jobs", json=body)
        assert resp.status_code == 201, resp.text
        job_id: str = resp.json()["id"]
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.http.get(f"/jobs/{job_id}").json()
        return found

    def wait(self, job_id: str, phases: set[str], timeout: float = 180) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["phase"] in phases else None

        found: dict[str, Any] = eventually(reached, timeout, what=f"{job_id} to reach {phases}")
        return found

    def logs(self, job_id: str) -> str:
        chunks = self.http.get(f"/jobs/{job_id}/logs").json()["chunks"]
        return "".join(c["text"] for c in chunks)

    def cancel(self, job_id: str) -> None:
        self.http.post(f"/jobs/{job_id}/cancel")

    def settle(self, job_ids: list[str], timeout: float = 120) -> None:
        """Cancel `job_ids` and wait until none of them holds a GPU."""
        for j in job_ids:
            self.cancel(j)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(self.job(j)["phase"] in ("Cancelled", "Succeeded", "Failed") for j in job_ids):
                return
            time.sleep(0.5)


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    tmp = tmp_path_factory.mktemp("gpu-tier")
    gpus = nvidia_smi()
    with (
        # PYTHONPATH kept: scripts/gpu-tier.sh installs Shoal's dependencies beside the
        # machine's own torch, in a directory of their own.
        serve.serving(tmp, env={"SHOAL_GPUS": "auto", "PYTHONPATH": _pythonpath()}) as s,
        httpx.Client(
            base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        ) as http,
    ):
        resp = http.post("/queues", json={"name": "gpu", "guaranteed": len(gpus)})
        assert resp.status_code in (200, 201), resp.text
        yield Tier(http, s.state, gpus)
