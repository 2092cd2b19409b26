"""The environment every backend gives a worker: Shoal's identity variables and each
framework's rendezvous (torchrun's, TF_CONFIG, an MPI hostfile), the same on every
backend so a job runs unchanged on local processes and on pods."""

from __future__ import annotations

import json
from collections.abc import Sequence

from scheduler import model
from scheduler.model import WorkerPlacement
from scheduler.spec import Framework, JobSpec

MASTER_PORT = 29500


def mpi_slots(placement: WorkerPlacement) -> int:
    """MPI ranks a worker runs: one per whole GPU it holds, else one."""
    return len(placement.gpus) if placement.gpus and placement.fraction >= 1 else 1


def hostfile_text(hosts: Sequence[str], slots: Sequence[int]) -> str:
    """An Open MPI hostfile: one line per distinct host, its slots summed (the local
    backend's workers all share 127.0.0.1). Shoal writes the hostfile only: it starts
    no `mpirun` launcher and no sshd (see docs/kubernetes.md, "MPI")."""
    total: dict[str, int] = {}
    for h, n in zip(hosts, slots, strict=True):
        total[h] = total.get(h, 0) + n
    return "".join(f"{h} slots={n}\n" for h, n in total.items())


def worker_env(
    spec: JobSpec,
    placement: WorkerPlacement,
    hosts: Sequence[str],
    *,
    job_id: str,
    attempt: int,
    gpu_ids: Sequence[str] = (),
    enforcement: model.Enforcement = model.Enforcement.ADVISORY,
    port: int = MASTER_PORT,
) -> dict[str, str]:
    """The environment of one worker, identical on every backend.

    `hosts[i]` is worker i's stable address (a pod DNS name through the headless Service
    on Kubernetes, 127.0.0.1 locally); `port` is the rendezvous port (the local backend
    gives each job its own, as all its workers share one host); `gpu_ids` are the GPU
    UUIDs or indices the worker may see. Shoal's variables are set after the user's
    `env`, so a job cannot spoof its rank.
    """
    env = dict(spec.plain_env)
    env.update(
        SHOAL_JOB_ID=job_id,
        SHOAL_JOB_NAME=spec.name,
        SHOAL_QUEUE=spec.queue,
        SHOAL_ATTEMPT=str(attempt),
        SHOAL_WORKER_INDEX=str(placement.worker),
        SHOAL_NUM_WORKERS=str(len(hosts)),
        SHOAL_NODE=placement.node,
        NVIDIA_VISIBLE_DEVICES=",".join(gpu_ids) if gpu_ids else "void",
    )
    if placement.gpus and placement.fraction < 1:
        env["SHOAL_GPU_FRACTION"] = f"{placement.fraction:.4f}"
        env["SHOAL_GPU_ENFORCEMENT"] = str(enforcement)
    if spec.elastic:
        env.update(_elastic(spec, hosts, port, job_id, attempt, placement))
    elif spec.framework in (Framework.PYTORCH, Framework.GENERIC):
        env.update(_torchrun(placement, hosts, port))
    elif spec.framework is Framework.TENSORFLOW:
        cluster = {"worker": [f"{h}:{port + 1 + i}" for i, h in enumerate(hosts)]}
        task = {"type": "worker", "index": placement.worker}
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
    elif spec.framework is Framework.MPI:
        env["OMPI_MCA_orte_default_hostfile"] = "/etc/shoal/hostfile"
        env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"  # the hostfile's names are FQDNs
        env["SHOAL_MPI_HOSTS"] = ",".join(hosts)
    return env


def _torchrun(placement: WorkerPlacement, hosts: Sequence[str], port: int) -> dict[str, str]:
    """torchrun starts one process per GPU of the worker (Kubeflow's nprocPerNode):
    PET_NPROC_PER_NODE is the worker's whole-GPU count (1 for a fraction or CPU),
    WORLD_SIZE counts processes (workers x nproc), RANK is the worker's (node) rank."""
    n, rank, master = len(hosts), placement.worker, hosts[0]
    nproc = mpi_slots(placement)  # the same count: one per whole GPU, else one
    return {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(n * nproc),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
        "PET_NNODES": str(n),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(nproc),
    }


# torchrun's c10d rendezvous, tuned for resizing (each is a `--rdzv-conf` key): once the
# least workers are in, it waits `last_call_timeout` s for more (torchrun: 30) before
# the round starts; a worker is dropped from it once it missed `keep_alive_max_attempt`
# heartbeats `keep_alive_interval` s apart (torchrun: 3 x 5 s), so the survivors of a
# shrink re-form without it after about 6 s instead of 15.
RDZV_CONF = "last_call_timeout=5,keep_alive_interval=2,keep_alive_max_attempt=3"


def _elastic(
    spec: JobSpec,
    hosts: Sequence[str],
    port: int,
    job_id: str,
    attempt: int,
    placement: WorkerPlacement,
) -> dict[str, str]:
    """An elastic job's torchrun (Kubeflow's elasticPolicy): `--nnodes=min:max` and a c10d
    rendezvous hosted on worker 0's stable address, one rendezvous per attempt. Worker 0
    is never removed by a shrink, so the store outlives every resize: it alone hosts it
    (`is_host`: on one host, the local backend's, every worker's address matches the
    endpoint, and whichever started first would). torchrun sets each process's RANK and
    WORLD_SIZE at every re-rendezvous, so Shoal sets none."""
    host = "1" if placement.worker == 0 else "0"
    return {
        "PET_NNODES": f"{spec.min_workers}:{spec.max_workers}",
        "PET_NPROC_PER_NODE": str(mpi_slots(placement)),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{hosts[0]}:{port}",
        "PET_RDZV_ID": f"{job_id}-{attempt}",
        "PET_RDZV_CONF": f"is_host={host},{RDZV_CONF}",
        # The worker's own address in the rendezvous (rank 0's is its processes'
        # MASTER_ADDR), not whatever its hostname resolves to.
        "PET_LOCAL_ADDR": hosts[placement.worker],
        # Each round's processes get a store of their own on rank 0's agent, not the
        # agent's shared one: with it, an agent that joins a running job (a grow) waits
        # forever for the round's store address, which rank 0 published only in its first
        # round (torch 2.13; Shoal's tests/backends/test_local_elastic.py).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        # How often an agent checks its processes and the rendezvous for a worker that
        # waits to join (a grow): 0.5 s (torchrun 2.x's default is 0.1 s, older ones' 5).
        "PET_MONITOR_INTERVAL": "0.5",
        # Each resize is a restart of the workers to torchrun; a job may resize often.
        "PET_MAX_RESTARTS": "1000",
        "SHOAL_ELASTIC": f"{spec.min_workers}:{spec.max_workers}",
    }
