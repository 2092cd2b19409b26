"""The one small interface every cluster backend implements, and the optional abilities
some have, declared as small protocols and gathered once at wiring into `Capabilities`.

The scheduler loop is the only caller. It records a decision in the store first, then
calls the backend; every call must be idempotent (a repeat after a crash is harmless):
`launch` of an attempt that already runs does nothing, `stop` of a stopped job does
nothing. Implementations: `kubernetes` (a real cluster), `local` (simulated nodes, real
local processes), `sim` (virtual time, no processes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from scheduler import model
from scheduler.model import JobRequest, Node, RunningJob, WorkerPlacement
from scheduler.spec import JobSpec, Origin

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
    RESIZED = "Resized"  # a worker an elastic job's shrink removed; the job goes on


class BackendError(Exception):
    """One job's trouble with the cluster (a launch, bind or stop that did not happen).

    `transient`: the cluster could not be reached or was overloaded, so the same call later
    may work (the launch is resumable: the loop keeps the placement and repeats it). Not
    transient: the cluster refused the write (an admission webhook, a ResourceQuota or
    LimitRange, RBAC, an invalid object). The loop makes either that job's reason, with a
    per-job backoff, and goes on scheduling the others; a cycle never fails for one job.
    """

    transient: bool = False


class StillStopping(BackendError):
    """A grow would add back a worker index whose process, removed by a shrink, has not
    ended yet (its name or record is still taken): the loop repeats the grow later."""

    transient = True


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
    # An elastic job's worker a shrink removed, reported while it ends and after (the
    # local and sim backends; a Kubernetes pod is gone once it has ended).
    removed: bool = False

    @property
    def vacated(self) -> bool:
        """A removed worker that has ended: its exit is no failure of the job, and its
        index is free for a grow to add back, whatever size the job has now (a crash
        between a grow's record and the backend's grow leaves it inside the size)."""
        return self.removed and not self.holds_gpus

    @property
    def holds_gpus(self) -> bool:
        """Whether it still holds its GPUs: running, still running though failed, or
        bound and starting (pulling its image holds them as much as running)."""
        state = self.state
        return (
            state is WorkerState.RUNNING
            or self.still_running
            or (state is WorkerState.PENDING and bool(self.node))
        )

    @property
    def placement(self) -> model.WorkerPlacement:
        """Where it sits, as the core's placement."""
        return model.WorkerPlacement(self.worker, self.node, self.gpus, self.fraction)


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

    def capabilities(self) -> Capabilities:
        """Its optional abilities (the protocols below), each itself or None: declared,
        so mypy checks that a backend, and any wrapper of one, has what it claims."""
        ...

    def close(self) -> None: ...


class AsyncLaunches(Protocol):
    """Optional: launches on the backend's own threads. `launch_async` queues one (after the
    checks it can make at once: a refused spec raises here) and returns; the writes
    come later, each after `guard(what)`, which raises when they may no longer be made
    (the lease fence). Until the loop takes a launch back from `settled` its workers are
    reported pending. `settled`: each finished launch once, with its error (None: done),
    which the loop treats as `launch`'s own."""

    def launch_async(self, request: LaunchRequest, guard: Callable[[str], None]) -> None: ...

    def settled(self) -> Sequence[tuple[LaunchRequest, Exception | None]]: ...


class Resizable(Protocol):
    """Optional: a backend that resizes a running attempt of an elastic job in place (its
    workers are torchrun agents of one c10d rendezvous, which re-forms at each change).
    Without it, elastic jobs run at the size they start at."""

    def grow(self, request: LaunchRequest) -> None:
        """Start the workers of `request.placements` the attempt does not have yet (its
        first ones run already, unchanged); a repeat does nothing."""
        ...

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        """Stop these workers of the attempt (the stop file says `Resized`; SIGTERM, a kill
        after the grace period), leaving the others running; a repeat does nothing."""
        ...


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


class PendingNotes(Protocol):
    """Optional, with `ForeignWorkloads`: say on a foreign pod why it waits (Kubernetes:
    `PodScheduled=False` and a `FailedScheduling` event), when its reason changes."""

    def note_pending(self, job_id: str, message: str) -> None: ...


class DisruptionBudgets(Protocol):
    """Optional: a backend whose stops honour disruption budgets (Kubernetes: the
    Eviction API and PodDisruptionBudgets), so a stop may wait."""

    def disruption_blocked(self) -> Mapping[str, str]:
        """job id -> the budget that holds its workers now ("ns/name: why"): one a stop
        would wait for (the core prefers other victims), or one that refused a stop
        already made (that stop waits, and the job's preemptor says so)."""
        ...


class CapacityReporter(Protocol):
    """Optional: a backend whose `nodes()` is free room (less what others hold, less
    nodes that are cordoned or NotReady) rather than what the nodes could hold."""

    def capacity(self) -> Sequence[Node]:
        """Every node that could hold work again, as if empty (allocatable capacity):
        what admission judges "can never run" against. Without it, `nodes()` is."""
        ...


class JobFiles(Protocol):
    """Optional: a backend that keeps files per job (the local backend's logs), which the
    loop removes once the store no longer has the job."""

    def kept_jobs(self) -> set[str]:
        """Ids of the jobs it keeps files for."""
        ...

    def drop_files(self, job_id: str) -> bool:
        """Remove that job's files unless a worker of it still runs; True when gone."""
        ...


class LocalWorkers(Protocol):
    """Optional: workers other replicas can neither see nor stop (processes of this host
    under one state directory). Each launch records `instance` and `state_dir` (the
    `Launching` and `Launched` events), so a replica that takes over on the same host
    adopts the attempt instead of starting it twice (`scheduler.loop.lifecycle`)."""

    @property
    def instance(self) -> str: ...

    @property
    def state_dir(self) -> Path: ...

    def adopt(self, state: str, instance: str, job_id: str, attempt: int) -> bool:
        """Take over an attempt another replica launched here; False where it cannot."""
        ...


class FinishedRecords(Protocol):
    """Optional: a backend that keeps records of attempts, dropped once a job is over
    and its workers are all gone (its bookkeeping must not grow with history)."""

    def forget(self, job_id: str) -> None: ...


class ExcludedNodes(Protocol):
    """Optional: nodes or GPUs it does not offer, with why (the dashboard lists them)."""

    def excluded_nodes(self) -> dict[str, str]: ...


class WorkerLogs(Protocol):
    """Optional: workers' output as files (`GET /jobs/{id}/logs`): (attempt, worker,
    path) for each worker of the job."""

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]: ...


class JobNodeRules(Protocol):
    """Optional: where a pending job's workers may run beyond its spec's own rules, from
    what the cluster says of what it asks (a claim's volume topology, extended
    resources the nodes lack); `NodeRules.blocked` when no node can take it now. Called
    each cycle for each pending job: cheap for a job that asks nothing such."""

    def job_rules(self, spec: JobSpec) -> model.NodeRules | None: ...


class SpecRefusals(Protocol):
    """Optional: what of a valid spec this backend cannot run (the local backend's
    processes mount no claims), each (the spec's field, why): the API's 422, before
    anything is stored; empty: it can."""

    def spec_refusals(self, spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """A backend's optional abilities, resolved once at wiring: the loop, the fence and
    `shoal serve` read these typed fields, never probe the backend object."""

    resizable: Resizable | None = None
    foreign: ForeignWorkloads | None = None
    pending_notes: PendingNotes | None = None
    capacity: CapacityReporter | None = None
    files: JobFiles | None = None
    local_workers: LocalWorkers | None = None
    records: FinishedRecords | None = None
    excluded_nodes: ExcludedNodes | None = None
    logs: WorkerLogs | None = None
    disruptions: DisruptionBudgets | None = None
    job_rules: JobNodeRules | None = None
    spec_refusals: SpecRefusals | None = None
    async_launches: AsyncLaunches | None = None
