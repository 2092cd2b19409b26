"""An elastic PyTorch DDP job: torchrun agents that Shoal adds and removes while it trains.

Run as `torchrun examples/pytorch-elastic/train.py` (job.yaml): Shoal gives each worker
torchrun's elastic settings (PET_NNODES=min:max, a c10d rendezvous on worker 0), so
torchrun starts this script once per worker and restarts it, on every worker, whenever
the job grows or shrinks, with the new WORLD_SIZE. What lets the training go on across
those restarts is the checkpoint: rank 0 writes the model, the optimizer and the step to
CHECKPOINT_DIR every CHECKPOINT_EVERY steps (atomically), and every (re)start resumes
from the last one, so a resize costs at most CHECKPOINT_EVERY - 1 steps of work and the
loss keeps falling. On Kubernetes, CHECKPOINT_DIR must be storage all workers share.

CPU and gloo, a small MLP on a synthetic regression problem (each rank its shard).
Rank 0 prints one line per step, `SHOAL_PROGRESS {"step", "loss", "world", "t"}` (the
loss averaged over ranks, `t` the wall clock), and every rank exits 0 after STEPS steps
in total, however many restarts they took. Knobs (env): STEPS (200), CHECKPOINT_EVERY
(5), STEP_SECONDS (0.1, a pause per step so a resize is seen on a laptop),
CHECKPOINT_DIR (default `var/checkpoints/<SHOAL_JOB_ID>` under the working directory,
beside `shoal serve`'s state). With SHOAL_TIMING set, every rank also prints
`SHOAL_TIMING {"rank", "world", "at", "t"}` at each stage of its start (`start`, before
torch is imported; `imported`; `joined`, the process group formed; `built`, the data,
model and optimizer made; `loaded`, the checkpoint read and broadcast):
bench/elastic_resize_timing.py reads them.
"""

from __future__ import annotations

import json
import os
import sys
import time


def mark(at: str) -> None:
    """With SHOAL_TIMING set, one timestamped line for a stage of this process's start."""
    if os.environ.get("SHOAL_TIMING"):
        rank, world = (int(os.environ.get(v, "-1")) for v in ("RANK", "WORLD_SIZE"))
        said = {"rank": rank, "world": world, "at": at, "t": round(time.time(), 3)}
        print("SHOAL_TIMING " + json.dumps(said), flush=True)


mark("start")  # before torch: what importing it costs shows as the next stage

from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

mark("imported")

STEPS = int(os.environ.get("STEPS", "200"))
EVERY = max(1, int(os.environ.get("CHECKPOINT_EVERY", "5")))
PAUSE = float(os.environ.get("STEP_SECONDS", "0.1"))
JOB = os.environ.get("SHOAL_JOB_ID", "local")
CKPT_DIR = Path(os.environ.get("CHECKPOINT_DIR") or Path("var") / "checkpoints" / JOB)
CKPT = CKPT_DIR / "checkpoint.pt"
AGENT = os.getppid()  # torchrun's agent: when it is gone, so is this process's job


def preempted() -> bool:
    path = os.environ.get("SHOAL_PREEMPT_FILE")
    return path is not None and os.path.exists(path)


def save(net: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    CKPT_DIR.mkdir(parents=True, exist_ok=True)
    tmp = CKPT.with_suffix(f".tmp{os.getpid()}")
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, CKPT)  # a reader sees the old checkpoint or the new one, never half


def load(net: nn.Module, opt: torch.optim.Optimizer) -> int:
    """The step of the last checkpoint (its state loaded), or 0 without one."""
    if not CKPT.exists():
        return 0
    state = torch.load(CKPT, weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


def main() -> int:
    # RANK, WORLD_SIZE, MASTER_ADDR/PORT come from torchrun, new at every rendezvous. A
    # peer that goes away (a shrink) breaks the next collective; the timeout bounds a hang.
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    mark("joined")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(4096, 16)  # the same problem on every rank (fixed seed)
    w_true = torch.randn(16, 1)
    y = x @ w_true + 0.5 * torch.tanh(x[:, :1]) + 0.05 * torch.randn(4096, 1)
    x, y = x[rank::world], y[rank::world]
    net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    mark("built")  # the optimizer's first call imports torch._dynamo
    done = load(net, opt)  # before DDP, which broadcasts rank 0's parameters
    first = torch.tensor([done])
    dist.broadcast(first, 0)  # every rank resumes at rank 0's step
    done = int(first.item())
    mark("loaded")
    model = DistributedDataParallel(net)
    print(f"rank {rank}/{world}: from step {done + 1} of {STEPS}", flush=True)
    gen = torch.Generator().manual_seed(1000 * done + rank)
    for step in range(done + 1, STEPS + 1):
        if os.getppid() != AGENT:
            print(f"rank {rank}: torchrun's agent is gone, stopping", flush=True)
            return 1
        if preempted():
            print(f"rank {rank}: preempted at step {step}, stopping", flush=True)
            return 143  # the last checkpoint is where the next attempt resumes
        i = torch.randint(0, len(x), (128,), generator=gen)
        loss = nn.functional.mse_loss(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        if rank == 0:
            line = {"step": step, "loss": round(avg.item() / world, 6), "world": world}
            print("SHOAL_PROGRESS " + json.dumps({**line, "t": round(time.time(), 3)}), flush=True)
            if step % EVERY == 0 or step == STEPS:
                save(net, opt, step)
        if PAUSE > 0:
            time.sleep(PAUSE)
    print(f"rank {rank}: done", flush=True)
    return 0


def finish(code: int) -> None:
    """Tear the process group down, then exit without interpreter finalisation (gloo's
    threads can abort a finished worker there: see examples/pytorch-ddp/train.py). After
    a full run the barrier lets every rank finish its last collective first."""
    if code == 0:
        dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    finish(main())
