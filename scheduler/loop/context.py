"""What a cycle works with: `Cycle`, its context (the store's port, the fenced backend,
the time, the workers' environment), and `Memory`, what the loop remembers of jobs
from one cycle to the next.

The memory is in the process only: a restarted loop starts with an empty one and loses
nothing that matters, since the store holds every decision (a forgotten backoff only
means one early retry; a forgotten reason, one repeated write the store skips).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler import model
from scheduler.backends import base
from scheduler.loop.backoff import Backoff
from scheduler.loop.workerenv import WorkerEnv
from scheduler.store.port import LiveStore

# (job id, step, exception): one job's decision could not be carried out.
OnError = Callable[[str, str, Exception], None]


@dataclass
class Memory:
    """Per job, across cycles: the pending reason last written (an unchanged one costs no
    store round trip); the launch backoff after a refused or failed launch or bind; the
    retry backoff of failed attempts (2 s, 4 s, 8 s... at most 5 min); jobs whose
    handling raised (`isolation.record`: left alone until their delay is over); jobs
    launched by another replica's backend that this one cannot see (job id -> that
    backend's instance: reported once, never relaunched); stops a disruption budget
    holds back (reported once per budget); drift already logged."""

    reasons: dict[str, model.PendingReason] = field(default_factory=dict)
    launches: Backoff = field(default_factory=Backoff)
    retries: Backoff = field(default_factory=lambda: Backoff(base_s=2.0, max_s=300.0))
    faulty: Backoff = field(default_factory=lambda: Backoff(base_s=5.0, max_s=300.0))
    elsewhere: dict[str, str] = field(default_factory=dict)
    # Draining jobs whose stop a disruption budget holds back (job id -> what was said).
    blocked: dict[str, str] = field(default_factory=dict)
    violations: set[model.Violation] = field(default_factory=set)

    def held_back(self, now: float) -> set[str]:
        """Every job a backoff keeps out of this cycle's pending set."""
        return self.launches.held(now) | self.retries.held(now) | self.faulty.held(now)

    def keep_only(self, live: set[str], foreign: set[str], unreadable: set[str]) -> None:
        """Forget the jobs that are gone: the memory shrinks with the live jobs."""
        waiting = live | foreign
        self.reasons = {k: v for k, v in self.reasons.items() if k in waiting}
        self.launches.keep_only(waiting)
        self.retries.keep_only(live)
        self.faulty.keep_only(waiting | unreadable)


@dataclass(frozen=True)
class Cycle:
    """One cycle's context, passed to each step instead of a dozen arguments: the store
    (`db`), the backend behind the lease fence, the cycle's `now`, the environment given
    to every worker, the loop's memory, and where one job's error goes (`on_error`: the
    loop makes it that job's reason)."""

    db: LiveStore
    backend: base.ClusterBackend
    now: float
    worker_env: WorkerEnv
    memory: Memory
    on_error: OnError
