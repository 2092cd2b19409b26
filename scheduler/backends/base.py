"""The one small interface every cluster backend implements, and the worker environment
they all give a worker.

The scheduler loop is the only caller. It records a decision in the store first, then
calls the backend; every call must be idempotent (a repeat after a crash is harmless):
`launch` of an attempt that already runs does nothing, `stop` of a stopped job does
nothing. Implementations: `kubernetes` (a real cluster), `local` (simulated nodes, real
local processes), `sim` (virtual time, no processes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from scheduler import model
from scheduler.model import JobRequest, Node, RunningJob, WorkerPlacement
from scheduler.spec import Framework, JobSpec, Origin

MASTER_PORT = 29500


# How a GPU fraction is held to (`advisory`: the launcher's cooperative cap; `mps`): the
# node's, so the core's vocabulary owns it.
Enforcement = model.Enforcement


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Start every worker of one attempt of a job at the given placements."""

    job_id: str
    spec: JobSpec
    attempt: int
    placements: tuple[WorkerPlacement, ...]
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # The object the job was submitted as (a TrainingJob): a backend that can (Kubernetes)
    # makes it the owner of what it creates, so deleting the CR deletes the workers.
    owner: Origin | None = None


class StopReason(StrEnum):
    """Why a job's workers are stopped; a worker reads it from `SHOAL_STOP_FILE` (and
    only a preemption also writes `SHOAL_PREEMPTED=1` to `SHOAL_PREEMPT_FILE`), so a
    cancelled job need not checkpoint for a resume that will never come."""

    PREEMPTED = "Preempted"
    CANCELLED = "Cancelled"
    MAX_RUNTIME = "MaxRuntimeExceeded"
    FAILED = "Failed"  # the rest of a broken gang
    STOPPED = "Stopped"  # an orphan whose job's fate is unknown


class BackendError(Exception):
    """One job's trouble with the cluster (a launch, bind or stop that did not happen).

    `transient`: the cluster could not be reached or was overloaded, so the same call later
    may work (the launch is resumable: the loop keeps the placement and repeats it). Not
    transient: the cluster refused the write (an admission webhook, a ResourceQuota or
    LimitRange, RBAC, an invalid object). The loop makes either that job's reason, with a
    per-job backoff, and goes on scheduling the others; a cycle never fails for one job.
    """

    transient: bool = False


class WorkerState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    job_id: str
    attempt: int
    worker: int
    state: WorkerState
    exit_code: int | None = None
    message: str = ""
    node: str = ""
    # Where the worker sits, so the loop can keep a stopping worker's GPUs reserved
    # until its process is really gone (its job may already be back to Pending).
    gpus: tuple[int, ...] = ()
    fraction: float = 1.0
    queue: str = ""
    # A FAILED worker whose failure is the infrastructure's, not the job's (its node went
    # away, it was evicted, the kubelet refused it at admission): the attempt is retried
    # without using up `backoffLimit`.
    retryable: bool = False
    # FAILED as far as the job goes, but its process may still run on the node and hold
    # its GPUs (a pod with a DisruptionTarget condition, not yet gone): the loop keeps
    # its GPUs reserved until it is.
    still_running: bool = False


class ClusterBackend(Protocol):
    """What the scheduler loop needs from a cluster."""

    def nodes(self) -> Sequence[Node]:
        """Schedulable nodes with capacity left for Shoal (foreign usage subtracted)."""
        ...

    def launch(self, request: LaunchRequest) -> None:
        """Create the attempt's workers; a repeat of the same attempt is a no-op."""
        ...

    def stop(self, job_id: str, grace_period_s: float, *, reason: str = StopReason.STOPPED) -> None:
        """Tell the workers why (`StopReason`: the stop file, and `SHOAL_PREEMPTED` for a
        preemption), SIGTERM, then kill after the grace period. Idempotent: a repeat keeps
        the first stop's reason and deadline."""
        ...

    def workers(self) -> Sequence[WorkerStatus]:
        """The current state of every worker the backend knows of."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ForeignWorkloads(Protocol):
    """Optional: a backend whose cluster has pods Shoal did not create that ask Shoal to
    schedule them (single-worker jobs with ids the store does not hold)."""

    def foreign_requests(self) -> Sequence[JobRequest]:
        """The foreign pods waiting for a placement."""
        ...

    def foreign_running(self) -> Sequence[RunningJob]:
        """The foreign pods Shoal adopted that still hold resources (not in `nodes()`'s
        foreign usage: they count once, as running jobs in their queue)."""
        ...

    def bind_foreign(self, job_id: str, placement: WorkerPlacement) -> None:
        """Bind the pending foreign pod `job_id`; one already bound is left alone."""
        ...


@runtime_checkable
class PendingNotes(Protocol):
    """Optional, with `ForeignWorkloads`: say on a foreign pod why it waits (Kubernetes:
    `PodScheduled=False` and a `FailedScheduling` event), when its reason changes."""

    def note_pending(self, job_id: str, message: str) -> None: ...


@runtime_checkable
class CapacityReporter(Protocol):
    """Optional: a backend whose `nodes()` is free room (less what others hold, less
    nodes that are cordoned or NotReady) rather than what the nodes could hold."""

    def capacity(self) -> Sequence[Node]:
        """Every node that could hold work again, as if empty (allocatable capacity):
        what admission judges "can never run" against. Without it, `nodes()` is."""
        ...


@runtime_checkable
class JobFiles(Protocol):
    """Optional: a backend that keeps files per job (the local backend's logs), which the
    loop removes once the store no longer has the job."""

    def kept_jobs(self) -> set[str]:
        """Ids of the jobs it keeps files for."""
        ...

    def drop_files(self, job_id: str) -> bool:
        """Remove that job's files unless a worker of it still runs; True when gone."""
        ...


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
    enforcement: Enforcement = Enforcement.ADVISORY,
    port: int = MASTER_PORT,
) -> dict[str, str]:
    """The environment of one worker, identical on every backend.

    `hosts[i]` is worker i's stable address (a pod DNS name through the headless Service
    on Kubernetes, 127.0.0.1 locally); `port` is the rendezvous port (the local backend
    gives each job its own, as all its workers share one host); `gpu_ids` are the GPU
    UUIDs or indices the worker may see. Shoal's variables are set after the user's
    `env`, so a job cannot spoof its rank.
    """
    n, rank = len(hosts), placement.worker
    env = dict(spec.env)
    env.update(
        SHOAL_JOB_ID=job_id,
        SHOAL_JOB_NAME=spec.name,
        SHOAL_QUEUE=spec.queue,
        SHOAL_ATTEMPT=str(attempt),
        SHOAL_WORKER_INDEX=str(rank),
        SHOAL_NUM_WORKERS=str(n),
        SHOAL_NODE=placement.node,
        NVIDIA_VISIBLE_DEVICES=",".join(gpu_ids) if gpu_ids else "void",
    )
    if placement.gpus and placement.fraction < 1:
        env["SHOAL_GPU_FRACTION"] = f"{placement.fraction:.4f}"
        env["SHOAL_GPU_ENFORCEMENT"] = str(enforcement)
    if spec.framework in (Framework.PYTORCH, Framework.GENERIC):
        master = hosts[0]
        # torchrun starts one process per GPU of the worker (Kubeflow's nprocPerNode):
        # PET_NPROC_PER_NODE is the worker's whole-GPU count (1 for a fraction or CPU),
        # WORLD_SIZE counts processes (workers x nproc), RANK is the worker's (node) rank.
        nproc = len(placement.gpus) if placement.gpus and placement.fraction >= 1 else 1
        env.update(
            MASTER_ADDR=master,
            MASTER_PORT=str(port),
            WORLD_SIZE=str(n * nproc),
            RANK=str(rank),
            LOCAL_RANK="0",
            PET_MASTER_ADDR=master,
            PET_MASTER_PORT=str(port),
            PET_NNODES=str(n),
            PET_NODE_RANK=str(rank),
            PET_NPROC_PER_NODE=str(nproc),
        )
    elif spec.framework is Framework.TENSORFLOW:
        cluster = {"worker": [f"{h}:{port + 1 + i}" for i, h in enumerate(hosts)]}
        env["TF_CONFIG"] = json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": rank}}
        )
    elif spec.framework is Framework.MPI:
        env["OMPI_MCA_orte_default_hostfile"] = "/etc/shoal/hostfile"
        env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"  # the hostfile's names are FQDNs
        env["SHOAL_MPI_HOSTS"] = ",".join(hosts)
    return env
