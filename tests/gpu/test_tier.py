"""The GPU tier (issue 23, part 5) on a real GPU host: inventory, isolation and caps of
fractional workers, NCCL jobs that cannot share a GPU, a DDP job on cuda, and the memory
a preempted job held coming back. Run by scripts/gpu-tier.sh; skipped without a GPU."""

from __future__ import annotations

import re
import time

from support.wait import eventually

from .conftest import Tier

# A worker that takes `share` of its GPU's memory, waits until `peers` workers have done
# the same (so they hold it at once), then exits 0. `greedy` also tries 0.3 of the GPU,
# which its cap (MPS, or the launcher's cooperative cap) must refuse with an OOM.
WORKER = """
import os, sys, time, torch
d = sys.argv[1]
print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count(), flush=True)
total = torch.cuda.get_device_properties(0).total_memory
held = torch.empty(int(0.2 * total), dtype=torch.uint8, device="cuda")
print("took 0.2", flush=True)
if sys.argv[2] == "greedy":
    try:
        more = torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
        print("took 0.3: NOT CAPPED", flush=True)
    except torch.OutOfMemoryError:
        print("0.3 refused: OOM", flush=True)
open(os.path.join(d, os.environ["SHOAL_JOB_ID"]), "w").close()
end = time.time() + 120
while len(os.listdir(d)) < 4 and time.time() < end:
    time.sleep(0.2)
print("peers", len(os.listdir(d)), flush=True)
"""


def test_the_inventory_matches_nvidia_smi(tier: Tier) -> None:
    nodes = tier.http.get("/nodes").json()["data"]
    offered = sorted((n["gpuModel"], n["gpuMemoryMib"]) for n in nodes for _ in n["gpus"])
    smi = sorted((re.sub(r"\s+", "-", g.name), g.memory_mib) for g in tier.gpus)
    assert offered == smi
    assert {n["enforcement"] for n in nodes} <= {"mps", "advisory"}
    print("enforcement:", {n["name"]: n["enforcement"] for n in nodes})


def test_four_quarter_workers_see_only_their_gpu_and_only_the_greedy_one_is_refused(
    tier: Tier,
) -> None:
    d = tier.state.parent / "quarters"
    d.mkdir()
    jobs = [
        tier.submit(
            name=f"quarter-{i}",
            framework="generic",
            gpu=0.25,
            command=["python", "-c", WORKER, str(d), "greedy" if i == 0 else "modest"],
        )
        for i in range(4)
    ]
    done = [tier.wait(j, {"Succeeded", "Failed"}) for j in jobs]
    uuids = {g.uuid for g in tier.gpus}
    for i, (j, job) in enumerate(zip(jobs, done, strict=True)):
        log = tier.logs(j)
        assert job["phase"] == "Succeeded", log
        (p,) = job["placements"]
        assert p["fraction"] == 0.25 and p["enforcement"] in ("mps", "advisory")
        seen = re.search(r"visible (\S+) (\d+)", log)
        assert seen is not None and seen.group(1) in uuids and seen.group(2) == "1", log
        assert "took 0.2" in log and "peers 4" in log, log
        if i == 0:
            assert "0.3 refused: OOM" in log, log
        else:
            assert "0.3" not in log


def test_nccl_workers_that_would_share_a_gpu_wait_with_the_distinct_gpu_reason(
    tier: Tier,
) -> None:
    # One more worker than there are GPUs, half a GPU each: it fits only with two ranks
    # on one GPU, which NCCL refuses ("Duplicate GPU detected"), so it must wait.
    j = tier.submit(
        name="ddp-too-many",
        framework="pytorch",
        workers=len(tier.gpus) + 1,
        gpu=0.5,
        command=[
            "python",
            "-m",
            "scheduler.worker",
            "--",
            "python",
            "examples/pytorch-ddp/train.py",
        ],
    )
    try:
        job = eventually(
            lambda: (found := tier.job(j))["pendingReason"] and found, 60, what="a reason"
        )
        assert job["phase"] == "Pending"
        assert job["pendingReason"]["code"] == "DistinctGpus", job["pendingReason"]
    finally:
        tier.settle([j])


def test_a_one_gpu_ddp_job_trains_with_nccl_on_cuda_and_its_loss_falls(tier: Tier) -> None:
    j = tier.submit(
        name="ddp-one-gpu",
        framework="pytorch",
        gpu=1,
        env={"STEPS": "100"},
        command=[
            "python",
            "-m",
            "scheduler.worker",
            "--",
            "python",
            "examples/pytorch-ddp/train.py",
        ],
    )
    job = tier.wait(j, {"Succeeded", "Failed"})
    log = tier.logs(j)
    assert job["phase"] == "Succeeded", log
    assert "nccl on cuda:0" in log, log
    losses = [float(x) for x in re.findall(r'"loss": ([0-9.]+)', log)]
    assert len(losses) >= 3 and losses[-1] < losses[0] / 2, losses


def _used_mib(index: int) -> int:
    import pynvml  # only where a GPU is (conftest skips the tier otherwise)

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) // (1024 * 1024)
    finally:
        pynvml.nvmlShutdown()


def test_preempting_a_gpu_job_frees_its_memory_as_nvml_sees_it(tier: Tier) -> None:
    n = len(tier.gpus)
    hog = (
        "import time, torch\n"
        "x = [torch.empty(8 << 30, dtype=torch.uint8, device=f'cuda:{i}') "
        "for i in range(torch.cuda.device_count())]\n"
        "print('holding 8 GiB per GPU', flush=True)\n"
        "time.sleep(600)\n"
    )
    base = [_used_mib(g.index) for g in tier.gpus]
    low = tier.submit(
        name="hog", framework="generic", gpu=n, priority=0, command=["python", "-c", hog]
    )
    high = ""
    try:
        tier.wait(low, {"Running"})
        eventually(lambda: "holding" in tier.logs(low), 120, what="the hog to allocate")
        held = [_used_mib(g.index) for g in tier.gpus]
        assert all(h - b >= 7 * 1024 for h, b in zip(held, base, strict=True)), (base, held)
        high = tier.submit(
            name="urgent",
            framework="generic",
            gpu=n,
            priority=100,
            command=["python", "-c", "import time; time.sleep(600)"],
        )
        tier.wait(high, {"Running"}, timeout=180)
        events = [e["kind"] for e in tier.http.get(f"/jobs/{low}/events").json()["data"]]
        assert "Preempted" in events
        t0 = time.monotonic()
        eventually(
            lambda: all(
                _used_mib(g.index) - b < 1024 for g, b in zip(tier.gpus, base, strict=True)
            ),
            60,
            what="the preempted job's GPU memory to be freed",
        )
        print(f"memory back {time.monotonic() - t0:.1f}s after the preemptor ran")
    finally:
        tier.settle([j for j in (low, high) if j])
