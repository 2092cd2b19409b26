"""A real PyTorch DistributedDataParallel job on a small synthetic dataset.

With a GPU visible (`torch.cuda.is_available()`: on `shoal serve --gpus auto` each worker
sees only its own GPU, as device 0) it trains on `cuda` with NCCL; otherwise on the CPU
with gloo (the laptop demo and the tests). Every worker reads its rank from the
environment Shoal gives it (MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK), trains a small MLP on its shard of a synthetic
regression problem, and reports `step` and `loss` with `SHOAL_PROGRESS` lines. It
watches SHOAL_PREEMPT_FILE and stops cleanly (exit 143) when preempted. Seconds to run.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STEPS = int(os.environ.get("STEPS", "60"))


def preempted() -> bool:
    path = os.environ.get("SHOAL_PREEMPT_FILE")
    return bool(path) and os.path.exists(path)


def report(step: int, loss: float) -> None:
    print("SHOAL_PROGRESS " + json.dumps({"step": step, "loss": round(loss, 5)}), flush=True)


def main() -> int:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # the worker's one visible GPU
    # Reads MASTER_ADDR/PORT, RANK, WORLD_SIZE from the environment.
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    # The same synthetic problem on every rank (fixed seed); each trains on its shard.
    x = torch.randn(4096, 16)
    w_true = torch.randn(16, 1)
    y = x @ w_true + 0.5 * torch.tanh(x[:, :1]) + 0.05 * torch.randn(4096, 1)
    x, y = x[rank::world].to(device), y[rank::world].to(device)
    net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    model = DistributedDataParallel(net, device_ids=[0] if cuda else None)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    how = f"{dist.get_backend()} on {device}"
    print(f"rank {rank}/{world}: {len(x)} samples, {STEPS} steps, {how}", flush=True)
    for step in range(1, STEPS + 1):
        if preempted():
            print(f"rank {rank}: preempted at step {step}, stopping", flush=True)
            return 143
        i = torch.randint(0, len(x), (256,), device=device)
        loss = nn.functional.mse_loss(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients across ranks here
        opt.step()
        # Average the loss over ranks so every worker reports the job's loss.
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        if step % 5 == 0 or step == 1:
            report(step, avg.item() / world)
    print(f"rank {rank}: done", flush=True)
    return 0


def finish(code: int) -> None:
    """Tear the process group down, then exit without interpreter finalisation.

    Gloo's C++ threads can still be joinable when Python's finaliser destroys them,
    which aborts a finished worker with "terminate called without an active
    exception" (about 1 run in 20 here, torch 2.13). After a full run the barrier
    lets every rank finish its last collective first (a preempted rank skips it: its
    peers may be stopping at another step); `os._exit` skips the finaliser.
    """
    if code == 0:
        dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    finish(main())
