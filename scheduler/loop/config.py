"""The loop's settings (`LoopConfig`) and what one cycle reports (`CycleReport`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler import model
from scheduler.loop import apply, phases
from scheduler.loop.cache import CachePass
from scheduler.loop.workerenv import WorkerEnv


@dataclass(frozen=True)
class LoopConfig:
    holder: str = "shoal"
    interval_s: float = 2.0
    lease_ttl_s: float = 15.0
    core: model.Config = field(default_factory=model.Config)
    # Given to every worker (SHOAL_API_URL, SHOAL_API_TOKEN): one mapping, or per job
    # (`workerenv.ScopedWorkerEnv`: a token good for that job's progress only).
    worker_env: WorkerEnv = field(default_factory=dict)
    # Replicas elected through a Kubernetes Lease: cycle only while this one leads (the
    # store lease above stays the inner guard). None: always.
    is_leader: Callable[[], bool] | None = None
    # Finished jobs older than this (seconds since they finished) are deleted with their
    # events (`store.retention.purge_finished`); None keeps them forever.
    job_retention_s: float | None = None
    # Cycles between the scheduler cache's full passes (`scheduler.loop.cache`).
    full_pass_every: int = 300


@dataclass
class CycleReport:
    now: float
    result: model.CycleResult
    reconciled: phases.Reconciled
    applied: apply.Applied
    seconds: float
    # Seconds spent in each step of the cycle (lease, observe, reconcile, snapshot,
    # schedule, apply), and the snapshot the core was given: for metrics.
    steps: dict[str, float] = field(default_factory=dict)
    snapshot: model.Snapshot | None = None
    # What the scheduler cache spared, and what a full pass found it had wrong.
    cache: CachePass = field(default_factory=CachePass)
