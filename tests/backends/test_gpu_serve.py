"""`shoal serve --gpus auto` end to end where no GPU is: the GPU tier's logic against a
fake NVML (one H200) and a fake MPS control daemon. The inventory and a placement say
`mps`, a fractional worker gets its GPU's UUID and its MPS limits, an NCCL job that would
put two ranks on the one GPU waits with the distinct-GPU reason, and a host without a GPU
is refused with "no GPU found" unless the fallback is asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import serve
from support.wait import eventually

pytestmark = pytest.mark.integration  # starts `shoal serve` as a process

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


def _env(tmp: Path, config: dict[str, Any]) -> dict[str, str]:
    fake = tmp / "nvml.json"
    fake.write_text(json.dumps(config))
    return {
        "SHOAL_GPUS": "auto",
        "SHOAL_NVML_MODULE": "support.fake_nvml",
        "SHOAL_FAKE_NVML": str(fake),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}",
        "PATH": f"{TESTS / 'support' / 'fake_mps'}{os.pathsep}{os.environ['PATH']}",
    }


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp = tmp_path_factory.mktemp("gpu-serve")
    h200 = {"name": "NVIDIA H200", "uuid": UUID, "memoryMiB": 143771}
    with (
        serve.serving(tmp, env=_env(tmp, {"driver": "580.159.03", "gpus": [h200]})) as s,
        httpx.Client(
            base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        ) as client,
    ):
        assert client.post("/queues", json={"name": "gpu", "guaranteed": 1}).status_code == 201
        yield client


def _wait(http: httpx.Client, job_id: str, phases: set[str]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"/jobs/{job_id}").json()
        return job if job["phase"] in phases else None

    found: dict[str, Any] = eventually(reached, 90, what=f"{job_id} to reach {phases}")
    return found


def test_the_host_gpu_is_the_inventory_with_mps_enforcement(http: httpx.Client) -> None:
    (node,) = http.get("/nodes").json()["data"]
    assert (node["gpuModel"], node["gpuMemoryMib"], len(node["gpus"])) == ("NVIDIA-H200", 143771, 1)
    assert node["enforcement"] == "mps"


def test_a_quarter_worker_sees_its_uuid_and_mps_limits(http: httpx.Client) -> None:
    show = (
        "import os; print(*(f'{k}={os.environ.get(k)}' for k in ('CUDA_VISIBLE_DEVICES', "
        "'NVIDIA_VISIBLE_DEVICES', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', "
        "'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')))"
    )
    body = {"name": "quarter", "queue": "gpu", "image": "local", "framework": "generic"}
    command = ["python", "-c", show + "; import time; time.sleep(60)"]
    resp = http.post("/jobs", json={**body, "gpu": 0.25, "command": command})
    assert resp.status_code == 201, resp.text
    job = _wait(http, resp.json()["id"], {"Running", "Succeeded", "Failed"})
    assert job["phase"] == "Running"
    (p,) = job["placements"]
    assert (p["fraction"], p["enforcement"]) == (0.25, "mps")

    def logged() -> str | None:
        chunks = http.get(f"/jobs/{job['id']}/logs").json()["chunks"]
        text = "".join(c["text"] for c in chunks)
        return text if "CUDA_VISIBLE_DEVICES" in text else None

    log = eventually(logged, 60, what="the worker's output")
    http.post(f"/jobs/{job['id']}/cancel")
    _wait(http, job["id"], {"Cancelled"})  # its quarter is free again for the next test
    assert f"CUDA_VISIBLE_DEVICES={UUID} NVIDIA_VISIBLE_DEVICES={UUID}" in log
    assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={int(0.25 * 143771)}M" in log
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in log


def test_two_nccl_ranks_on_a_one_gpu_host_wait_with_the_distinct_gpu_reason(
    http: httpx.Client,
) -> None:
    body = {"name": "ddp", "queue": "gpu", "image": "local", "framework": "pytorch"}
    resp = http.post("/jobs", json={**body, "workers": 2, "gpu": 0.5, "command": ["true"]})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]

    def reason() -> dict[str, Any] | None:
        found: dict[str, Any] | None = http.get(f"/jobs/{job_id}").json()["pendingReason"]
        return found

    found = eventually(reason, 60, what="a pending reason")
    assert found["code"] == "DistinctGpus", found
    assert http.get(f"/jobs/{job_id}").json()["phase"] == "Pending"
    http.post(f"/jobs/{job_id}/cancel")


def test_serve_gpus_auto_on_a_host_without_a_gpu_says_so(tmp_path: Path) -> None:
    env = {**os.environ, **_env(tmp_path, {"gpus": [], "initError": "Driver Not Loaded"})}
    env["SHOAL_STATE_DIR"] = str(tmp_path / "state")
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", "0"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "no GPU found: NVML did not start (Driver Not Loaded)" in done.stderr
    assert "--fallback-simulated" in done.stderr
