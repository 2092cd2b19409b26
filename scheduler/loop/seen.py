"""What one cycle of the loop has found so far (`Seen`: steps 2 and 3, observe and
reconcile) and how long each step took (`Steps`), passed from step to step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from scheduler import model
from scheduler.backends import base
from scheduler.loop import phases
from scheduler.store.live import LiveJob, Unreadable


@dataclass
class Seen:
    """What one cycle has found so far (steps 2 and 3)."""

    nodes: tuple[model.Node, ...]
    foreign: base.ForeignWorkloads | None
    foreign_running: tuple[model.RunningJob, ...]
    foreign_pending: tuple[model.JobRequest, ...]
    attempts: dict[phases.AttemptKey, list[base.WorkerStatus]]
    live: list[LiveJob]
    unreadable: list[Unreadable]
    done: phases.Reconciled = field(default_factory=phases.Reconciled)
    draining: list[phases.AttemptKey] = field(default_factory=list)
    by_id: dict[str, LiveJob] = field(init=False)

    def __post_init__(self) -> None:
        self.reread(self.live, self.unreadable)

    def reread(self, live: list[LiveJob], unreadable: list[Unreadable]) -> None:
        self.live, self.unreadable = live, unreadable
        self.by_id = {lj.id: lj for lj in live}


class Steps:
    """Seconds spent in each step of the cycle, for the report."""

    def __init__(self) -> None:
        self.start = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def mark(self, step: str) -> None:
        t = time.perf_counter()
        self.seconds[step], self._last = t - self._last, t
